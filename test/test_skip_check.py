"""CI's check of skipped tests: a real pytest run writes its skips (test/skip_report.py, registered by conftest.py),
scripts/check_skips.py groups them by reason and fails on one that test/allowed_skips.txt does not allow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from script_loader import load_script

HERE = Path(__file__).resolve().parent
check_skips = load_script("check_skips")

PLANTED = '''
import pytest

def test_runs():
    pass

@pytest.mark.skipif(True, reason="needs a CUDA device")
def test_gpu():
    pass

def test_needs_an_environment():
    pytest.skip("the demo-0.1 environment is missing (/nowhere): run bash scripts/setup.sh")

@pytest.mark.xfail(reason="not done yet")
def test_expected_to_fail():
    assert False
'''
MODULE_SKIP = 'import pytest\npytest.skip("launch_ros cannot be imported (planted)", allow_module_level=True)\n'


def _run_planted(tmp_path: Path) -> dict:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_planted.py").write_text(PLANTED)
    (suite / "test_launch_planted.py").write_text(MODULE_SKIP)
    report = tmp_path / "skips.json"
    env = {**os.environ, "OXYGEN_SKIP_REPORT": str(report), "PYTHONPATH": str(HERE), "OXYGEN_IN_NETNS": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", str(suite)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=suite)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(report.read_text())


def test_a_planted_disallowed_skip_fails_the_check_and_is_named(tmp_path: Path, capsys) -> None:
    report = _run_planted(tmp_path)
    reasons = {s["test"].split("::")[-1]: s["reason"] for s in report["skipped"]}
    assert reasons == {
        "test_gpu": "needs a CUDA device",
        "test_needs_an_environment": "the demo-0.1 environment is missing (/nowhere): run bash scripts/setup.sh",
        "test_expected_to_fail": "expected failure: not done yet",
        "test_launch_planted.py": "launch_ros cannot be imported (planted)",
    }
    assert report["exitstatus"] == 0
    path = tmp_path / "skips.json"
    assert check_skips.main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "skipped tests by reason (4):" in out
    assert "allowed      needs a CUDA device" in out and "allowed      launch_ros cannot be imported" in out
    assert "FAIL: 2 skipped test(s)" in out
    assert "test_planted.py::test_needs_an_environment" in out and "expected failure: not done yet" in out

    # Only allowed reasons left: the check passes and still prints the summary.
    report["skipped"] = [s for s in report["skipped"] if s["reason"].startswith(("needs a CUDA", "launch_ros"))]
    path.write_text(json.dumps(report))
    assert check_skips.main([str(path)]) == 0
    assert "skipped tests by reason (2):" in capsys.readouterr().out


def test_no_report_fails_the_check(tmp_path: Path, capsys) -> None:
    assert check_skips.main([str(tmp_path / "none.json")]) == 2
    (tmp_path / "empty.json").write_text("")  # .ci/run's file when pytest never got to write it
    assert check_skips.main([str(tmp_path / "empty.json")]) == 2
    assert "no skip report" in capsys.readouterr().err


def test_every_allowed_reason_is_one_a_test_gives() -> None:
    """An allowed reason no test says any more (or misspelled) would hide nothing: it must be in a test's source."""
    sources = "\n".join(p.read_text() for p in HERE.glob("*.py") if p.name != Path(__file__).name)
    prefixes = check_skips.allowed_prefixes(check_skips.ALLOWED)
    assert prefixes and [p for p in prefixes if p not in sources] == []


def _ci_tree(tmp_path: Path, planted: str) -> Path:
    """.ci/run and the checker as they are, beside a scripts/test.sh that runs pytest on one planted file."""
    repo = HERE.parent
    tree = tmp_path / "clone"
    for part in (".ci/run", "scripts/check_skips.py", "test/allowed_skips.txt"):
        (tree / part).parent.mkdir(parents=True, exist_ok=True)
        (tree / part).write_text((repo / part).read_text())
    (tree / ".venv").symlink_to(repo / ".venv")
    (tree / "test" / "test_planted.py").write_text(planted)
    (tree / "scripts" / "test.sh").write_text(
        f'exec "{sys.executable}" -m pytest -q -p conftest -p no:cacheprovider test/test_planted.py\n')
    return tree


def _ci_run(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(HERE), "OXYGEN_IN_NETNS": "1"}
    env.pop("OXYGEN_SKIP_REPORT", None)  # .ci/run sets its own
    return subprocess.run(["bash", ".ci/run"], capture_output=True, text=True, timeout=300, env=env, cwd=tree)


ALLOWED_ONLY = 'import pytest\n\n@pytest.mark.skipif(True, reason="needs a CUDA device")\ndef test_gpu():\n    pass\n'


def test_ci_run_prints_the_skips_and_fails_on_a_disallowed_one(tmp_path: Path) -> None:
    done = _ci_run(_ci_tree(tmp_path, PLANTED))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "skipped tests by reason (3):" in done.stdout and "FAIL: 2 skipped test(s)" in done.stdout

    done = _ci_run(_ci_tree(tmp_path / "allowed", ALLOWED_ONLY))
    assert done.returncode == 0 and "skipped tests by reason (1):" in done.stdout and "FAIL" not in done.stdout


def test_ci_run_keeps_a_failed_tests_status_and_still_prints_the_skips(tmp_path: Path) -> None:
    done = _ci_run(_ci_tree(tmp_path, ALLOWED_ONLY + "\ndef test_fails():\n    assert False\n"))
    assert done.returncode == 1 and "1 failed" in done.stdout and "skipped tests by reason (1):" in done.stdout
