"""The chunk-execution study: naive vs time-aligned vs time-aligned + real-time chunking, in closed loop, at
several injected observation→action latencies (`oxygen-sim chunking`).

Every (variant, latency) runs the same held-out episodes with the same action noise through `run_episode`
(the evaluator that drives the runtime as the node does). Per point: success rate, mean time to success,
the jump between the running and the new setpoint at each trajectory switch, and the RMS jerk of the joints.
Writes results.json, table.md and chunking.png into the output folder.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oxygen_ros.runtime import PolicyRuntime, RuntimeConfig

from .episode import EpisodeSpec
from .evaluate import EpisodeResult, EvalSettings, run_episode


@dataclass(frozen=True)
class Variant:
    name: str
    time_alignment: str
    rtc: bool


VARIANTS = (
    Variant("naive", "none", False),
    Variant("aligned", "stamp", False),
    Variant("aligned+rtc", "stamp", True),
)
DEFAULT_LATENCIES = (0.0, 0.1, 0.2, 0.3)


def point_summary(results: list[EpisodeResult]) -> dict[str, Any]:
    """The figures of one (variant, latency) point."""
    times = [r.time_to_success_s for r in results if r.success and r.time_to_success_s is not None]
    jumps = [j for r in results for j in r.switch_jumps]
    return {
        "episodes": len(results),
        "success_rate": sum(r.success for r in results) / len(results),
        "mean_time_to_success_s": float(np.mean(times)) if times else None,
        "mean_switch_jump_rad": float(np.mean(jumps)) if jumps else None,
        "p95_switch_jump_rad": float(np.percentile(jumps, 95)) if jumps else None,
        "mean_jerk_rms": float(np.mean([r.jerk_rms for r in results])),
        "chunks": sum(r.chunks for r in results),
        "not_sent": sum(len(r.rejected) for r in results),
    }


def run_study(
    config: RuntimeConfig,
    settings: EvalSettings,
    specs: Sequence[EpisodeSpec],
    latencies: Sequence[float] = DEFAULT_LATENCIES,
    variants: Sequence[Variant] = VARIANTS,
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """One row per (variant, latency), in that order."""
    rows = []
    runtimes: dict[bool, PolicyRuntime] = {}
    for variant in variants:
        if variant.rtc not in runtimes:
            runtimes[variant.rtc] = PolicyRuntime.load(dataclasses.replace(config, rtc=variant.rtc))
        runtime = runtimes[variant.rtc]
        for latency in latencies:
            point = dataclasses.replace(settings, latency_s=latency, time_alignment=variant.time_alignment)
            with torch.inference_mode():
                results = [run_episode(runtime, spec, point) for spec in specs]
            row = {"variant": variant.name, "latency_s": latency, **point_summary(results)}
            progress(_row_line(row))
            rows.append(row)
    return rows


def _fmt(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _row_line(row: dict[str, Any]) -> str:
    return (f"{row['variant']:<12} {row['latency_s'] * 1e3:4.0f} ms  success {row['success_rate']:.2f}  "
            f"t {_fmt(row['mean_time_to_success_s'], '.2f')} s  jump {_fmt(row['mean_switch_jump_rad'], '.4f')} rad  "
            f"jerk {row['mean_jerk_rms']:.1f}")  # fmt: skip


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| variant | latency (ms) | success rate | time to success (s) | mean switch jump (rad) | p95 switch jump (rad) | RMS jerk (rad/s³) | chunks not sent |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['latency_s'] * 1e3:.0f} | {r['success_rate']:.2f} | {_fmt(r['mean_time_to_success_s'], '.2f')} "
            f"| {_fmt(r['mean_switch_jump_rad'], '.4f')} | {_fmt(r['p95_switch_jump_rad'], '.4f')} | {r['mean_jerk_rms']:.1f} "
            f"| {r['not_sent']} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("success_rate", "success rate"), ("mean_time_to_success_s", "time to success (s)"),
              ("mean_switch_jump_rad", "mean jump at a switch (rad)"), ("mean_jerk_rms", "RMS jerk (rad/s³)")]  # fmt: skip
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    for ax, (key, label) in zip(axes, panels):
        for name in dict.fromkeys(r["variant"] for r in rows):
            pts = [(r["latency_s"] * 1e3, r[key]) for r in rows if r["variant"] == name and r[key] is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=name)
        ax.set_xlabel("observation → action latency (ms)")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(-0.05, 1.05)
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(rows: list[dict[str, Any]], out: Path, meta: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    (out / "table.md").write_text(markdown_table(rows))
    title = f"{meta.get('episodes')} episodes per point, {meta.get('model')}"
    plot(rows, out / "chunking.png", title)


def combine(folders: Sequence[Path]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows and metadata of several runs (e.g. one variant per process), in variant order. The runs must share
    their metadata apart from the variants (same model, episodes, timing)."""
    runs = [json.loads((Path(f) / "results.json").read_text()) for f in folders]
    metas = [{k: v for k, v in r["meta"].items() if k != "variants"} for r in runs]
    if any(m != metas[0] for m in metas[1:]):
        raise ValueError("the runs differ in more than their variants; they cannot share one table")
    order = {v.name: i for i, v in enumerate(VARIANTS)}
    rows = sorted((row for r in runs for row in r["rows"]), key=lambda r: (order.get(r["variant"], 99), r["latency_s"]))
    return rows, metas[0]
