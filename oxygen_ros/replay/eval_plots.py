"""The plots of ``oxygen-replay eval`` (matplotlib, no display): predicted against recorded per dimension over
the bag with the worst ticks marked, and the error against the horizon step. With ``--compare`` both
policies are drawn (A solid, B dashed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .metrics import ErrorTable

WORST_MARKED = 3
COLOURS = ("tab:blue", "tab:orange")


def _pyplot():  # noqa: ANN202
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _worst_ticks(table: ErrorTable, n: int = WORST_MARKED) -> list[int]:
    """Rows of the ticks with the largest mean executed-steps MAE over the dimensions."""
    mae = table.per_tick("executed")[0]
    seen = np.isfinite(mae)
    score = np.where(seen.any(axis=1), np.where(seen, mae, 0).sum(axis=1) / np.maximum(seen.sum(axis=1), 1), -1)
    return [int(i) for i in np.argsort(-score)[:n] if score[i] >= 0]


def _step_times(table: ErrorTable) -> np.ndarray:
    """[T, H] bag time of each chunk's steps (NaN past a shorter chunk)."""
    times = np.full((len(table.targets_s), table.horizon), np.nan)
    for i, t in enumerate(table.targets_s):
        times[i, : len(t)] = t
    return times


def plot_timelines(tables: Sequence[ErrorTable], labels: Sequence[str], path: Path, dpi: int = 70) -> Path:
    """One panel per dimension: the reference, each policy's executed steps stitched over the bag, and the
    worst ticks of the first policy marked."""
    plt = _pyplot()
    first = tables[0]
    dims = first.dims
    cols = 2 if len(dims) > 4 else 1
    rows = math.ceil(len(dims) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 1.5 * rows + 0.8), sharex=True, squeeze=False)
    worst = _worst_ticks(first)
    arrays = [(*table.arrays(), _step_times(table)) for table in tables]
    for d, dim in enumerate(dims):
        ax = axes[d % rows][d // rows]
        for k, (err, exe, pred, times) in enumerate(arrays):
            if k == 0:
                ref = (pred - err)[:, :, d]
                order = np.argsort(times[np.isfinite(ref)])
                ax.plot(times[np.isfinite(ref)][order], ref[np.isfinite(ref)][order], color="black", lw=1.6, alpha=0.5,
                        label="recorded")  # fmt: skip
            shown = exe & np.isfinite(pred[:, :, d])
            order = np.argsort(times[shown])
            ax.plot(times[shown][order], pred[:, :, d][shown][order], color=COLOURS[k % 2], lw=1.0,
                    ls="-" if k == 0 else "--", label=labels[k])  # fmt: skip
        for i in worst:
            ax.axvline(first.times_s[i], color="red", lw=0.8, ls=":")
        ax.set_ylabel(dim, fontsize=7, rotation=0, ha="right", va="center")
        ax.tick_params(labelsize=6)
    for extra in range(len(dims), rows * cols):
        axes[extra % rows][extra // rows].axis("off")
    handles, names = axes[0][0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], color="red", lw=0.8, ls=":"))
    names.append("worst ticks")
    fig.legend(handles, names, loc="upper center", ncol=len(names), fontsize=7, frameon=False,
               title="executed steps of each chunk against the recording", title_fontsize=8)  # fmt: skip
    for ax in axes[-1]:
        ax.set_xlabel("bag time (s)", fontsize=7)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.55 / (1.5 * rows + 0.8)))
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def plot_horizon(tables: Sequence[ErrorTable], labels: Sequence[str], executed_steps: int, path: Path, dpi: int = 70) -> Path:
    """MAE against the horizon step, per output group of dimensions (grippers apart) and the mean."""
    plt = _pyplot()
    groups = {"arm joints": [not g for g in tables[0].grippers], "grippers": list(tables[0].grippers)}
    groups = {k: v for k, v in groups.items() if any(v)}
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 2.8), squeeze=False)
    for ax, (group, mask) in zip(axes[0], groups.items()):
        for k, table in enumerate(tables):
            err = np.abs(table.arrays()[0])[:, :, np.asarray(mask)]
            with np.errstate(invalid="ignore"):
                per_dim = np.nanmean(err, axis=0)  # [H, dims]
            steps = np.arange(1, per_dim.shape[0] + 1)
            for d in range(per_dim.shape[1]):
                ax.plot(steps, per_dim[:, d], color=COLOURS[k % 2], lw=0.5, alpha=0.35, ls="-" if k == 0 else "--")
            ax.plot(steps, np.nanmean(per_dim, axis=1), color=COLOURS[k % 2], lw=2, ls="-" if k == 0 else "--",
                    label=f"{labels[k]} (mean)")  # fmt: skip
        ax.axvline(executed_steps + 0.5, color="grey", lw=0.8, ls=":")
        ax.set_title(f"{group}: MAE per horizon step (executed left of the line)", fontsize=7)
        ax.set_xlabel("horizon step", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=6, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
