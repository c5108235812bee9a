"""Scaling a command step so that it stays on the path the policy asked for.

Where a limit acts the whole step is shortened by one factor (its direction kept) rather than each joint
clipped on its own: clipping joints one by one bends the path (a diagonal move becomes an L), scaling keeps
the arm on the straight line toward the target, only slower or shorter.
"""

from __future__ import annotations

import numpy as np

__all__ = ["scale_step", "cap_norm"]


def scale_step(reference: np.ndarray, target: np.ndarray, max_step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``reference + s · (target − reference)`` with the largest s ≤ 1 that keeps every joint's step within
    ``max_step`` (``inf`` = that joint sets no bound). Returns the result and, per joint, whether that joint's
    bound is what shortened the step (the binding joints; all False when nothing was scaled).

    A zero-length step and a step exactly at a bound are returned unchanged."""
    ref = np.asarray(reference, dtype=np.float64)
    tgt = np.asarray(target, dtype=np.float64)
    bound = np.asarray(max_step, dtype=np.float64)
    step = tgt - ref
    size = np.abs(step)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(size > bound, bound / np.where(size > 0, size, 1.0), 1.0)
    s = float(np.min(ratio)) if ratio.size else 1.0
    if s >= 1.0:
        return tgt.copy(), np.zeros(step.shape, dtype=bool)
    binding = ratio <= s * (1 + 1e-12)
    return ref + s * step, binding


def cap_norm(vector: np.ndarray, max_norm: float) -> tuple[np.ndarray, bool]:
    """The vector shortened to ``max_norm`` (Euclidean; ``inf`` = no bound), its direction kept; and whether it was."""
    v = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(v))
    if norm <= max_norm:
        return v.copy(), False
    return v * (max_norm / norm), True
