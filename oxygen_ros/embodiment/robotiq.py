"""The Robotiq 2F-85 as the ROS 2 driver ``ros2_robotiq_gripper`` reports and takes it, against a gripper position
0 open .. 1 closed (DROID's ``get_gripper_position`` / ``update_gripper`` command).

The driver's hardware interface exposes ``robotiq_85_left_knuckle_joint`` in radians, linear in the gripper's
0..255 position register: 0 rad fully open, ``gripper_closed_position`` (its parameter, 0.7929 rad by default; the
URDF's limit is 0.0..0.8) fully closed. Polymetis, which DROID reads, reports the opening width linear in the same
register, so DROID's ``1 - width / max_width`` equals ``angle / closed_angle``.
"""

from __future__ import annotations

from typing import Sequence

from .units import Fn

DRIVER_CLOSED_ANGLE = 0.7929  # ros2_robotiq_gripper's default gripper_closed_position (rad)


def knuckle_converter(args: Sequence[float]) -> tuple[Fn, Fn]:
    """(gripper position 0 open .. 1 closed → knuckle angle rad, knuckle angle → gripper position) for
    ``(closed_angle,)``: the driver's ``gripper_closed_position``."""
    (closed,) = args
    if not 0 < closed <= 0.8:
        raise ValueError(f"closed_angle {closed:g} rad is not a Robotiq 2F-85 knuckle angle (0 < angle <= 0.8)")
    return (lambda x: x * closed), (lambda x: x / closed)
