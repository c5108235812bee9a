"""The loss curves of a training run as a PNG (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _smooth(values: list[float], window: int) -> np.ndarray:
    """Moving average over ``window`` steps, skipping NaN (a task without tokens in that step's batch)."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < window or window <= 1:
        return v
    ok = ~np.isnan(v)
    kernel = np.ones(window)
    total = np.convolve(np.where(ok, v, 0.0), kernel, mode="valid")
    count = np.convolve(ok.astype(np.float64), kernel, mode="valid")
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / count


def _plot_average(ax, values: list[float], window: int, steps: int, **style: object) -> None:  # noqa: ANN001
    """The moving average of ``values``, each point at the last step of its window."""
    curve = _smooth(values, window)
    ax.plot(np.arange(len(curve)) + (steps - len(curve)), curve, **style)


def plot_losses(history: dict[str, list[float]], path: str | Path) -> Path:
    """Flow-matching and text losses per step (raw and a moving average) on log axes, each text task's moving
    average beside the text loss (``text_<task>`` keys) and the grounding and recognition losses (dashed), plus the
    learning rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = len(history["total"])
    window = max(1, steps // 50)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, key, title in zip(axes, ("flow", "text"), ("flow matching (velocity MSE)", "text (next-token CE)")):
        ax.plot(history[key], color="0.75", linewidth=0.6, label="per step")
        _plot_average(ax, history[key], window, steps, color="C0", label=f"mean of {window}")
        if key == "text":
            for i, task in enumerate(k for k in history if k.startswith("text_")):
                _plot_average(ax, history[task], window, steps, color=f"C{i + 2}", linewidth=0.9,
                              label=task.removeprefix("text_"))
            for key, colour, label in (("grounding", "C1", "grounding (instruction's object)"), ("recognition", "C9", "recognition (naming)"),
                                       ("pointing", "C8", "pointing (texts' objects)")):
                if history.get(key):
                    _plot_average(ax, history[key], window, steps, color=colour, linestyle="--", linewidth=0.9, label=label)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.legend(loc="upper right", fontsize=8)
    axes[2].plot(history["lr"], color="C1")
    axes[2].set_title("learning rate")
    axes[2].set_xlabel("step")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
