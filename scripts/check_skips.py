"""The skipped tests of one pytest run, grouped by reason, and whether each reason is allowed: .ci/run's last step.

    python scripts/check_skips.py REPORT.json [--allowed test/allowed_skips.txt]

REPORT.json is what test/skip_report.py writes (pytest run with ``OXYGEN_SKIP_REPORT=REPORT.json``). A reason is
allowed when it starts with one of the allowed file's lines: what a machine cannot do (no CUDA device, ...), never
what scripts/setup.sh should have prepared. Exit status: 0 all allowed, 1 some not, 2 no readable report.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ALLOWED = REPO / "test" / "allowed_skips.txt"
SHOWN_TESTS = 5  # per disallowed reason


def allowed_prefixes(path: Path) -> list[str]:
    """The allowed file's reasons: one literal prefix a line, `#` comments and blank lines ignored."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def by_reason(skipped: list[dict[str, str]]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = defaultdict(list)
    for skip in skipped:
        groups[skip["reason"]].append(skip["test"])
    return dict(sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])))


def summary(skipped: list[dict[str, str]], prefixes: list[str], allowed_name: str) -> tuple[list[str], int]:
    """The lines to print and how many skipped tests have a reason not allowed."""
    groups = by_reason(skipped)
    lines = [f"skipped tests by reason ({len(skipped)}):"]
    refused: dict[str, list[str]] = {}
    for reason, tests in groups.items():
        ok = any(reason.startswith(prefix) for prefix in prefixes)
        lines.append(f"  {len(tests):4d}  {'allowed    ' if ok else 'NOT ALLOWED'}  {reason}")
        if not ok:
            refused[reason] = tests
    count = sum(len(tests) for tests in refused.values())
    if refused:
        lines.append(f"FAIL: {count} skipped test(s) with a reason not in {allowed_name} "
                     "(set-up should have made what they need, or the reason is new: say it there if a machine "
                     "cannot do it):")  # fmt: skip
        for reason, tests in refused.items():
            lines.append(f"  {reason}")
            lines += [f"      {test}" for test in tests[:SHOWN_TESTS]]
            if len(tests) > SHOWN_TESTS:
                lines.append(f"      ... and {len(tests) - SHOWN_TESTS} more")
    return lines, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--allowed", type=Path, default=ALLOWED)
    args = parser.parse_args(argv)
    try:
        skipped = json.loads(args.report.read_text())["skipped"]
    except (OSError, ValueError, KeyError) as error:
        print(f"FAIL: no skip report from the test run ({args.report}: {error})", file=sys.stderr)
        return 2
    shown = args.allowed.resolve()
    name = str(shown.relative_to(REPO)) if shown.is_relative_to(REPO) else str(shown)
    lines, refused = summary(skipped, allowed_prefixes(args.allowed), name)
    print("\n".join(lines))
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
