"""What the Interbotix X-series driver (xs_sdk) and its Python arm interface accept, for the simulated ALOHA
that stands in for it: no ROS types.

xs_sdk subscribes ``<robot>/commands/joint_group`` (``JointGroupCommand``: the group's name, one position per
joint of the group) and ``<robot>/commands/joint_single`` (``JointSingleCommand``: a joint's name, one value),
and drops a command whose group or joint it does not know or whose group command has another count of values.
Interbotix's ``arm.py`` (``_check_joint_limits``, which openpi's and Trossen's real envs go through) refuses a
whole arm command outright when a position, truncated to 3 decimals, lies outside the joint's limits: the
command is not sent and the arm stays where it was told to be. Refused commands are counted with the reason.
Limits: the ViperX 300 s URDF of interbotix_xsarm_descriptions (radians), as config/robots/aloha.yaml has them.
The gripper command (the gripper joint's radians, current-based position mode) is passed on unchecked, as
``InterbotixGripperXS`` publishes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .units import ARM_JOINTS

# vx300s: waist, shoulder, elbow, forearm_roll, wrist_angle, wrist_rotate (rad)
VX300S_LOWER = (-3.14158, -1.85005, -1.76278, -3.14158, -1.8675, -3.14158)
VX300S_UPPER = (3.14158, 1.25664, 1.6057, 3.14158, 2.23402, 3.14158)


class CommandRefused(ValueError):
    """The driver would not execute this command (the reason in words)."""


@dataclass(frozen=True)
class XsArm:
    """One puppet's driver: its arm group (the six joints of ``ARM_JOINTS``) and its gripper joint."""

    group: str = "arm"
    gripper: str = "gripper"
    lower: tuple[float, ...] = VX300S_LOWER
    upper: tuple[float, ...] = VX300S_UPPER

    def group_command(self, name: str, cmd: list[float]) -> list[float]:
        """The positions of a joint_group command, or CommandRefused (group, count, value, limits)."""
        if name != self.group:
            raise CommandRefused(f"joint group {name!r} is not this arm's (it has {self.group!r})")
        if len(cmd) != len(ARM_JOINTS):
            raise CommandRefused(f"group {name!r} has {len(ARM_JOINTS)} joints, the command {len(cmd)} values")
        if not all(math.isfinite(x) for x in cmd):
            raise CommandRefused(f"group {name!r}: non-finite command {list(cmd)}")
        truncated = [int(x * 1000) / 1000.0 for x in cmd]  # arm.py's 3 decimals, towards zero
        outside = [f"{j} {x:.4f} not in [{lo}, {hi}]" for j, x, t, lo, hi in zip(ARM_JOINTS, cmd, truncated, self.lower, self.upper)
                   if not lo <= t <= hi]  # fmt: skip
        if outside:
            raise CommandRefused(f"group {name!r} out of the joint limits: {'; '.join(outside)}")
        return [float(x) for x in cmd]

    def single_command(self, name: str, cmd: float) -> float:
        """The value of a joint_single command for the gripper, or CommandRefused (an unknown joint, non-finite)."""
        if name != self.gripper:
            raise CommandRefused(f"joint {name!r} is not this arm's single joint (it has {self.gripper!r})")
        if not math.isfinite(cmd):
            raise CommandRefused(f"joint {name!r}: non-finite command {cmd}")
        return float(cmd)
