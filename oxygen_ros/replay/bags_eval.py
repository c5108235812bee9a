"""``oxygen-replay eval`` on many bags: which bags an argument names, one bag judged as the single-bag command
judges it, and the combined report (each bag's figures and verdict, the figures over all bags and theirs,
the worst bag). No ROS, no Ray: the same pieces run on one machine or as Ray tasks (`ray_bags`)."""

from __future__ import annotations

import glob
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bagio import BagError
from .config import ReplayConfig
from .evaluate import EvalError, EvalOptions, EvalReplay
from .metrics import ErrorTable, judge, mean_executed_mae, merged

BAG_SUFFIXES = (".mcap", ".db3")


def resolve_bags(arguments: Sequence[str]) -> list[Path]:
    """Every bag the arguments name, in order, each once: a bag file, a rosbag2 folder, a folder of bags (its
    .mcap and .db3 files and rosbag2 folders, sorted) or a glob. ValueError for an argument that names none."""
    found: list[Path] = []
    for argument in arguments:
        paths = [Path(p) for p in sorted(glob.glob(argument))] if any(c in argument for c in "*?[") else [Path(argument)]
        bags = [b for p in paths for b in _bags_in(p)]
        if not bags:
            raise ValueError(f"{argument}: no bag there (.mcap, .db3 or a rosbag2 folder)")
        found += [b for b in bags if b not in found]
    return found


def _bags_in(path: Path) -> list[Path]:
    if path.is_dir() and not (path / "metadata.yaml").is_file():
        return [p for p in sorted(path.iterdir()) if p.suffix in BAG_SUFFIXES or (p / "metadata.yaml").is_file()]
    return [path] if path.exists() else []


@dataclass
class BagOutcome:
    """One bag judged (summary and table), or why it was not (``error``); the node that ran it with --ray."""

    bag: str
    summary: dict[str, Any] | None = None
    table: ErrorTable | None = None
    error: str | None = None
    node: str | None = None


def judge_bag(bag: str, config: ReplayConfig, options: EvalOptions,
              expected: tuple[type[Exception], ...] = (EvalError, BagError)) -> BagOutcome:  # fmt: skip
    """``bag`` evaluated as the single-bag command does (its checks before the model loads); an ``expected``
    error (bad input) comes back as the outcome's error, anything else is raised."""
    replay = EvalReplay(bag, config, options)
    try:
        summary = replay.evaluate()
    except expected as exc:
        return BagOutcome(bag, error=str(exc))
    return BagOutcome(bag, summary, replay.table)


def combined_report(outcomes: Sequence[BagOutcome], limits: tuple[Mapping[str, float], Mapping[str, float]],
                    scope: str) -> dict[str, Any]:  # fmt: skip
    """Per bag its figures and verdict, the figures over every judged bag with the thresholds applied to them,
    the worst bag (highest mean executed MAE), the bags not judged, and the exit code: 2 none judged; else 3 a
    damaged bag; else 1 a threshold exceeded (a bag's or the whole's) or a bag not judged; else 0."""
    judged = [o for o in outcomes if o.summary is not None]
    rows = []
    for o in judged:
        assert o.summary is not None
        verdict = judge(o.summary, *limits, scope)
        mean, worst = mean_executed_mae(o.summary)
        rows.append({"bag": o.bag, "exit_code": verdict.exit_code, "passed": not verdict.failures,
                     "failures": [f.line(scope) for f in verdict.failures], "damage": verdict.damage,
                     "mean_executed_mae": mean, "worst_dim": worst, "summary": o.summary})  # fmt: skip
    report: dict[str, Any] = {"bags": rows, "not_judged": [{"bag": o.bag, "error": o.error} for o in outcomes if o.summary is None]}
    if not judged:
        return {**report, "overall": None, "worst_bag": None, "passed": False, "failures": [], "exit_code": 2}
    overall = _overall(judged)
    overall_failures = judge(overall, *limits, scope).failures
    failures = [f"overall: {f.line(scope)}" for f in overall_failures] + [f"{r['bag']}: {line}" for r in rows for line in r["failures"]]
    known = [r for r in rows if r["mean_executed_mae"] is not None]
    worst = max(known, key=lambda r: r["mean_executed_mae"]) if known else None
    code = 3 if any(r["damage"] for r in rows) else 1 if failures or report["not_judged"] else 0
    return {**report, "overall": overall, "passed": not failures, "failures": failures, "exit_code": code,
            "worst_bag": {k: worst[k] for k in ("bag", "mean_executed_mae", "worst_dim")} if worst else None}  # fmt: skip


def _overall(judged: Sequence[BagOutcome]) -> dict[str, Any]:
    """The error figures over every judged bag's ticks; each dimension's worst tick names its bag."""
    tables = [o.table for o in judged]
    assert all(t is not None for t in tables)
    table, origin = merged(tables)  # type: ignore[arg-type]
    summary = table.summary()
    for row in summary["dims"].values():
        for worst in row["worst_tick"].values():
            if worst is not None:
                bag, episode = origin[worst["episode"]]
                worst.update(bag=judged[bag].bag, episode=episode)
    summaries = [o.summary for o in judged if o.summary is not None]
    summary["outputs"] = summaries[0]["outputs"]
    summary["chunks"] = sum(s["chunks"] for s in summaries)
    summary["bag_duration_s"] = round(sum(s["bag_duration_s"] for s in summaries), 3)
    return summary
