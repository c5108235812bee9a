"""Unit conversions a robot driver and a dataset may disagree on."""

from __future__ import annotations

import math

import numpy as np

LEROBOT_MOTOR_MODES = ("degrees", "range_m100_100", "range_0_100")


def lerobot_motor_units(
    mode: str, range_min: int, range_max: int, zero_tick: float = 2048.0, resolution: int = 4096, drive_mode: bool = False
) -> tuple[float, float]:
    """(scale, offset) so that ``lerobot_value = scale * radians + offset`` for one Feetech/Dynamixel motor.

    ``radians`` is what a ROS driver reports: ``(tick - zero_tick) · 2π / resolution``. ``lerobot_value`` is
    what LeRobot's ``MotorsBus._normalize`` reports for the same tick with the calibration's ``range_min`` /
    ``range_max`` (``degrees``: relative to the middle of the range; ``range_m100_100`` and ``range_0_100``:
    the range mapped linearly; ``drive_mode`` mirrors the two ranges). The range clamp is not modelled.
    """
    if range_max == range_min:
        raise ValueError(f"calibration range_min and range_max are both {range_min}")
    ticks_per_rad = resolution / (2 * math.pi)
    span = range_max - range_min
    if mode == "degrees":
        unit = 360.0 / (resolution - 1)
        return ticks_per_rad * unit, (zero_tick - (range_min + range_max) / 2) * unit
    if mode == "range_m100_100":
        scale, offset = ticks_per_rad * 200 / span, (zero_tick - range_min) / span * 200 - 100
        return (-scale, -offset) if drive_mode else (scale, offset)
    if mode == "range_0_100":
        scale, offset = ticks_per_rad * 100 / span, (zero_tick - range_min) / span * 100
        return (-scale, 100 - offset) if drive_mode else (scale, offset)
    raise ValueError(f"unknown LeRobot motor mode {mode!r}; choose one of {list(LEROBOT_MOTOR_MODES)}")


def quat_to_axis_angle(quat_xyzw: np.ndarray) -> np.ndarray:
    """A unit quaternion (x, y, z, w) → axis-angle vector (axis · angle), as LIBERO's state builds it."""
    q = np.asarray(quat_xyzw, dtype=np.float64)
    w = float(np.clip(q[3], -1.0, 1.0))
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return q[:3] * 2.0 * math.acos(w) / den
