"""LeRobot's motor units against a ROS driver's radians, for one Feetech STS3215 motor (SO-100/101).

LeRobot (``src/lerobot/motors/motors_bus.py``, ``MotorsBus._normalize`` / ``_unnormalize``) maps a motor's
present tick to DEGREES ``(tick - mid) · 360 / (4096 - 1)`` with ``mid = (range_min + range_max) / 2``
(unbounded), or to RANGE_M100_100 / RANGE_0_100 linearly over the calibration's ``range_min..range_max`` with
the tick clamped to that range (``drive_mode`` mirrors it); back, the value (clamped to ±100 or 0..100 in the
range modes) becomes ``int(...)`` ticks. A ROS driver reports and takes radians ``(tick - zero_tick) · 2π /
4096`` (4096 = ``MODEL_RESOLUTION["sts3215"]``, ``motors/feetech/tables.py``). The converters below go through
the integer tick as LeRobot does, so the driver's tick equals LeRobot's.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

Fn = Callable[[np.ndarray], np.ndarray]
RESOLUTION = 4096  # ticks per turn of an STS3215


def radians_to_tick(radians: np.ndarray, zero_tick: float) -> np.ndarray:
    """The driver's tick of a position it reports in radians (the nearest whole tick)."""
    return np.rint(np.asarray(radians, dtype=np.float64) * RESOLUTION / (2 * math.pi) + zero_tick)


def tick_to_radians(tick: np.ndarray, zero_tick: float) -> np.ndarray:
    return (np.asarray(tick, dtype=np.float64) - zero_tick) * 2 * math.pi / RESOLUTION


def _calibration(range_min: float, range_max: float) -> None:
    if range_min >= range_max or range_min < 0 or range_max > RESOLUTION - 1:
        raise ValueError(f"range_min {range_min:g} and range_max {range_max:g} must be ticks 0 <= min < max <= {RESOLUTION - 1}")


def lerobot_degrees_converter(args: Sequence[float]) -> tuple[Fn, Fn]:
    """(LeRobot degrees → driver radians, driver radians → LeRobot degrees) for ``(range_min, range_max, zero_tick)``."""
    range_min, range_max, zero_tick = args
    _calibration(range_min, range_max)
    mid, max_res = (range_min + range_max) / 2, RESOLUTION - 1  # the operations in LeRobot's order

    def to_robot(degrees: np.ndarray) -> np.ndarray:
        return tick_to_radians(np.trunc((degrees * max_res / 360) + mid), zero_tick)

    def to_model(radians: np.ndarray) -> np.ndarray:
        return (radians_to_tick(radians, zero_tick) - mid) * 360 / max_res

    return to_robot, to_model


def lerobot_range_converter(low: float) -> Callable[[Sequence[float]], tuple[Fn, Fn]]:
    """The converter of LeRobot's RANGE_M100_100 (``low`` -100) or RANGE_0_100 (``low`` 0) for
    ``(range_min, range_max, drive_mode, zero_tick)``."""

    def make(args: Sequence[float]) -> tuple[Fn, Fn]:
        range_min, range_max, drive_mode, zero_tick = args
        _calibration(range_min, range_max)
        if drive_mode not in (0.0, 1.0):
            raise ValueError(f"drive_mode must be 0 or 1, got {drive_mode:g}")
        span = 100.0 - low
        mirror = (lambda v: -v) if low < 0 else (lambda v: 100.0 - v)
        flip = mirror if drive_mode else (lambda v: v)

        def to_robot(value: np.ndarray) -> np.ndarray:
            bounded = np.clip(flip(value), low, 100.0)
            return tick_to_radians(np.trunc(((bounded - low) / span) * (range_max - range_min) + range_min), zero_tick)

        def to_model(radians: np.ndarray) -> np.ndarray:
            tick = np.clip(radians_to_tick(radians, zero_tick), range_min, range_max)
            return flip(((tick - range_min) / (range_max - range_min)) * span + low)

        return to_robot, to_model

    return make
