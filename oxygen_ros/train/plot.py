"""The loss curves of a training run as a PNG (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _smooth(values: list[float], window: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if len(v) < window or window <= 1:
        return v
    return np.convolve(v, np.ones(window) / window, mode="valid")


def plot_losses(history: dict[str, list[float]], path: str | Path) -> Path:
    """Flow-matching and text losses per step (raw and a moving average) on log axes, plus the learning rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = len(history["total"])
    window = max(1, steps // 50)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, key, title in zip(axes, ("flow", "text"), ("flow matching (velocity MSE)", "text (next-token CE)")):
        ax.plot(history[key], color="0.75", linewidth=0.6, label="per step")
        smooth = _smooth(history[key], window)
        ax.plot(np.arange(len(smooth)) + (steps - len(smooth)), smooth, color="C0", label=f"mean of {window}")
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
