"""What ``oxygen-replay eval`` writes: the per-tick CSV and the tables a person reads (no ROS)."""

from __future__ import annotations

import csv
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from oxygen_ros.runtime.safety import refusal_line

from .metrics import ErrorTable

CSV_FIELDS = ("episode", "tick", "time_s", "dim", "mae", "rmse", "max", "executed_mae", "executed_rmse", "executed_max",
              "compared_steps", "executed_steps", "predicted_first", "reference_first")  # fmt: skip


def write_ticks_csv(table: ErrorTable, path: Path) -> Path:
    """One row per tick (counted from its episode's start) and dimension: its chunk's errors over the horizon and over the executed steps."""
    all_stats = table.per_tick("horizon")
    executed_stats = table.per_tick("executed")
    err, exe, pred = table.arrays()
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(CSV_FIELDS)
        for i, (tick, time_s) in enumerate(zip(table.ticks, table.times_s)):
            for d, dim in enumerate(table.dims):
                compared = np.isfinite(err[i, :, d])
                out.writerow([table.episodes[i], tick, f"{time_s:.4f}", dim, *(_cell(s[i, d]) for s in all_stats),
                              *(_cell(s[i, d]) for s in executed_stats), int(compared.sum()),
                              int((compared & exe[i]).sum()), _cell(pred[i, 0, d]), _cell(pred[i, 0, d] - err[i, 0, d])])  # fmt: skip
    return path


def write_steps_csv(table: ErrorTable, path: Path) -> Path:
    """One row per horizon step and dimension: MAE, RMSE and max over every tick's chunk."""
    err = np.abs(table.arrays()[0])  # [T, H, D]
    seen = np.isfinite(err)
    safe = np.where(seen, err, 0.0)
    n = seen.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mae, rmse = safe.sum(axis=0) / n, np.sqrt((safe**2).sum(axis=0) / n)
    worst = np.where(n > 0, safe.max(axis=0), np.nan)
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(("step", "dim", "mae", "rmse", "max", "compared"))
        for h in range(err.shape[1]):
            for d, dim in enumerate(table.dims):
                out.writerow([h + 1, dim, _cell(mae[h, d]), _cell(rmse[h, d]), _cell(worst[h, d]), int(n[h, d])])
    return path


def write_files(tables: list[ErrorTable], labels: list[str], summary: Mapping[str, Any], out: Path, plots: bool) -> dict[str, str]:
    """ticks.csv and steps.csv of the first table (ticks_b.csv of a second), the PNGs unless not ``plots``."""
    from .eval_plots import plot_horizon, plot_timelines

    out.mkdir(parents=True, exist_ok=True)
    files = {"ticks_csv": str(write_ticks_csv(tables[0], out / "ticks.csv")),
             "steps_csv": str(write_steps_csv(tables[0], out / "steps.csv"))}
    if len(tables) == 2:
        files["ticks_b_csv"] = str(write_ticks_csv(tables[1], out / "ticks_b.csv"))
    if plots:
        files["joints_png"] = str(plot_timelines(tables, labels, out / "joints.png"))
        files["horizon_png"] = str(plot_horizon(tables, labels, summary["executed_steps"], out / "horizon.png"))
    return files


def print_warnings(summary: Mapping[str, Any], prefix: str = "") -> None:
    """An evaluation's warnings and unit hints on stderr."""
    for warning in summary["warnings"]:
        print(f"oxygen-replay: warning: {prefix}{warning}", file=sys.stderr)
    for dim, row in summary["dims"].items():
        if row.get("unit_hint"):
            print(f"oxygen-replay: warning: {prefix}{dim}: units: {row['unit_hint']}", file=sys.stderr)


def _cell(value: float) -> str:
    return "" if not np.isfinite(value) else f"{value:.6g}"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def safety_line(safety: Mapping[str, Any]) -> str:
    """The guard's work in one line: refused chunks by output, joint and reason, holds, limit hits."""
    holds = safety.get("holds") or {}
    hits = safety.get("limit_hits") or {}
    refused = refusal_line(safety.get("refusals")) or "no chunk refused"
    held = ", ".join(f"{k} {n}" for k, n in holds.items()) or "none"
    return f"{refused}; holds: {held}; limit hits: {sum(hits.values())}"


def print_table(summary: Mapping[str, Any], out: TextIO) -> None:
    """Per dimension: executed steps and whole horizon MAE / RMSE / max, gripper agreement."""
    print(f"eval {summary['bag']} ({summary['bag_duration_s']:.1f} s) with {summary['params']} against the "
          f"{'recorded commands' if summary['against'] == 'commands' else 'achieved joint states'}", file=out)  # fmt: skip
    print(f"  {summary['chunks']} chunks of {summary['horizon']} steps, {summary['executed_steps']} executed "
          f"(replan {summary['replan']}), seed {summary['seed']}", file=out)  # fmt: skip
    print(f"  guard: {safety_line(summary.get('safety', {}))}", file=out)
    print_dims(summary, out)


def print_dims(summary: Mapping[str, Any], out: TextIO) -> None:
    """The per-dimension rows of an evaluation's summary (one bag's, or several bags' together)."""
    width = max(len(d) for d in summary["dims"]) + 2
    print(f"  {'dimension':<{width}} {'exec MAE':>9} {'exec RMSE':>9} {'exec max':>9} {'MAE':>9} {'RMSE':>9} {'max':>9}  open/closed agree (exec / all)",
          file=out)  # fmt: skip
    for dim, row in summary["dims"].items():
        ex = row["executed"]
        grip = row.get("gripper")
        agree = f"  {grip['executed_agreement'] * 100:.0f}% / {grip['agreement'] * 100:.0f}%" if grip and grip["agreement"] is not None else ""
        print(f"  {dim:<{width}} {_fmt(ex['mae']):>9} {_fmt(ex['rmse']):>9} {_fmt(ex['max']):>9} {_fmt(row['mae']):>9} "
              f"{_fmt(row['rmse']):>9} {_fmt(row['max']):>9}{agree}", file=out)  # fmt: skip


def print_inputs_and_episodes(summary: Mapping[str, Any], out: TextIO) -> None:
    """The cameras' stamp offsets against the joint states, then one line per episode."""
    cams = summary.get("input_timing", {}).get("cameras", {})
    offsets = [f"{t} {r['offset_to_joint_states_s']:+.3f} s" for t, r in cams.items() if "offset_to_joint_states_s" in r]
    if offsets:
        print(f"  camera stamps against the joint states': {', '.join(offsets)}", file=out)
    episodes = summary.get("episodes", [])
    if len(episodes) < 2:
        return
    how = {"topic": "episode events", "gap": "pauses in the joint states"}.get(episodes[0]["source"], "")
    print(f"  {len(episodes)} episodes ({how}); executed-steps MAE per episode:", file=out)
    for ep in episodes:
        worst = ep["worst_dim"]
        tail = f", worst {worst} {_fmt(ep['executed_mae'][worst])}" if worst else ""
        print(f"    episode {ep['index']}: {ep['start_s']:.2f} s + {ep['duration_s']:.2f} s, {ep['chunks']} chunks, "
              f"mean {_fmt(ep['mean_executed_mae'])}{tail}", file=out)  # fmt: skip


def print_comparison(comparison: Mapping[str, Any], labels: Sequence[str], out: TextIO) -> None:
    a, b = labels
    width = max(len(d) for d in comparison["dims"]) + 2
    scope = "executed steps" if comparison["scope"] == "executed" else "whole horizon"
    print(f"compare ({scope} MAE): A = {a}, B = {b}", file=out)
    for dim, row in comparison["dims"].items():
        print(f"  {dim:<{width}} A {_fmt(row['a']):>8}  B {_fmt(row['b']):>8}  closer: {row['better'].upper()}", file=out)
    wins = comparison["wins"]
    print(f"  mean A {comparison['mean_mae']['a']:.4f}, B {comparison['mean_mae']['b']:.4f}: {comparison['closer'].upper()} is "
          f"closer ({wins['a']} dims A, {wins['b']} dims B, {wins['tie']} ties)", file=out)  # fmt: skip
