"""A measured gain curve as a conversion: ``piecewise(x0, y0, x1, y1, ...)`` joins the points (model value x,
robot value y) with straight lines, both strictly increasing, so it runs both ways; beyond the end points it
continues the end segments' slopes. E.g. robosuite's OSC rotation speed per unit of delta, which is not linear.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .units import Fn


def _extended(x: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """np.interp inside [xs[0], xs[-1]], the end segments' lines outside."""
    x = np.asarray(x, dtype=np.float64)
    inside = np.interp(x, xs, ys)
    low = ys[0] + (x - xs[0]) * (ys[1] - ys[0]) / (xs[1] - xs[0])
    high = ys[-1] + (x - xs[-1]) * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return np.where(x < xs[0], low, np.where(x > xs[-1], high, inside))


def piecewise_converter(args: Sequence[float]) -> tuple[Fn, Fn]:
    """(model → robot, robot → model) through the points ``args`` = x0, y0, x1, y1, …; ValueError when they are
    fewer than two, odd in number, or x or y does not strictly increase."""
    if len(args) < 4 or len(args) % 2:
        raise ValueError(f"piecewise takes pairs x, y of at least two points, got {len(args)} numbers")
    xs, ys = np.asarray(args[0::2], dtype=np.float64), np.asarray(args[1::2], dtype=np.float64)
    if np.any(np.diff(xs) <= 0) or np.any(np.diff(ys) <= 0):
        raise ValueError("piecewise points must strictly increase in x and in y (one value each way)")
    return (lambda x: _extended(x, xs, ys)), (lambda y: _extended(y, ys, xs))
