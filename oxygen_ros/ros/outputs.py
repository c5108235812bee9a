"""Outputs for other ROS stacks: the JointTrajectory for a joint trajectory controller, and topic names.

Timing follows DESIGN §4 (ros2_control's joint_trajectory_controller): `header.stamp` 0 = start on
arrival, the first point one step period ahead (a point at 0 would already be in the past), and strictly
increasing `time_from_start`. Only the configured joints are commanded: the first len(joint_names) action
dimensions, in that order, read as absolute joint positions, clamped to the configured limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from .convert import duration_from_s

__all__ = ["JointLimits", "final_text_topic", "text_topic", "trajectory_msg"]


def text_topic(task: str) -> str:
    """TextDelta stream of a task (private to the node's name)."""
    return f"~/text/{task}"


def final_text_topic(task: str) -> str:
    """The finished text of each request of a task, as std_msgs/String."""
    return f"~/text/{task}/final"


@dataclass(frozen=True)
class JointLimits:
    """Position limits per joint (same order as the joint names); empty = no clamping."""

    lower: tuple[float, ...] = ()
    upper: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if len(self.lower) != len(self.upper):
            raise ValueError(f"{len(self.lower)} lower limits but {len(self.upper)} upper limits")
        bad = [i for i, (lo, hi) in enumerate(zip(self.lower, self.upper)) if lo > hi]
        if bad:
            raise ValueError(f"lower limit above upper limit for joints at indices {bad}")

    def clamp(self, positions: np.ndarray) -> tuple[np.ndarray, int]:
        """Clamp [..., n_joints] positions; returns (clamped, number of values that were changed)."""
        if not self.lower:
            return positions, 0
        lo, hi = np.asarray(self.lower), np.asarray(self.upper)
        if positions.shape[-1] != lo.size:
            raise ValueError(f"{positions.shape[-1]} joint positions for {lo.size} joint limits")
        clamped = np.clip(positions, lo, hi)
        return clamped, int(np.count_nonzero(clamped != positions))


def trajectory_msg(
    actions: np.ndarray,
    joint_names: Sequence[str],
    step_period_s: float,
    limits: JointLimits = JointLimits(),
) -> tuple[JointTrajectory, int]:
    """A JointTrajectory from a (horizon, action_dim) chunk: point i at (i + 1) x step period.

    Returns the message and how many positions were clamped. Raises ValueError for an empty chunk, fewer
    action dimensions than joints, non-finite actions or a step period that is not positive.
    """
    values = np.asarray(actions, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] == 0:
        raise ValueError(f"actions must be a non-empty (horizon, action_dim) array, got shape {values.shape}")
    if not joint_names:
        raise ValueError("a trajectory needs at least one joint name")
    n = len(joint_names)
    if values.shape[1] < n:
        raise ValueError(f"{values.shape[1]} action dimensions cannot command {n} joints")
    if not step_period_s > 0:
        raise ValueError(f"step period must be > 0, got {step_period_s}")
    positions = values[:, :n]
    if not np.all(np.isfinite(positions)):
        raise ValueError("actions contain NaN or infinite values")
    positions, clamped = limits.clamp(positions)
    msg = JointTrajectory()  # header.stamp stays 0: "start now" for the controller
    msg.joint_names = [str(j) for j in joint_names]
    for i, row in enumerate(positions):
        point = JointTrajectoryPoint()
        point.positions = [float(x) for x in row]
        point.time_from_start = duration_from_s((i + 1) * step_period_s)
        msg.points.append(point)
    return msg, clamped
