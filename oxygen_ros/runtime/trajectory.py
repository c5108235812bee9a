"""Actions → timed trajectory points, without ROS types: the ONE builder the ROS node and the simulator share.

Timing follows ros2_control's joint_trajectory_controller (DESIGN §4, §7): the points are timed from a start
instant (0 = "start on receipt"), point i of a chunk sits at (i + 1) step periods (a point at 0 would
already be in the past) and ``time_from_start`` strictly increases. Only the named joints are commanded:
the first len(joint_names) action dimensions, in that order, read as absolute joint positions, clamped to
the given limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["JointLimits", "TimedTrajectory", "trajectory_points"]


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


@dataclass(frozen=True)
class TimedTrajectory:
    """What a JointTrajectory carries: joint names, a start instant and points timed from it."""

    joint_names: tuple[str, ...]
    times_s: np.ndarray  # [N] time_from_start of each point, strictly increasing
    positions: np.ndarray  # [N, len(joint_names)] float64
    start_time_ns: int = 0  # header.stamp; 0 = start when received

    def __post_init__(self) -> None:
        times, pos = np.asarray(self.times_s, dtype=np.float64), np.asarray(self.positions, dtype=np.float64)
        if times.ndim != 1 or times.size == 0:
            raise ValueError("a trajectory needs at least one point")
        if pos.shape != (times.size, len(self.joint_names)):
            raise ValueError(f"positions of shape {pos.shape} for {times.size} points and {len(self.joint_names)} joints")
        if len(set(self.joint_names)) != len(self.joint_names):
            raise ValueError(f"joint names repeat: {list(self.joint_names)}")
        if not (np.all(np.isfinite(times)) and np.all(np.isfinite(pos))):
            raise ValueError("trajectory contains NaN or infinite values")
        if times[0] < 0 or np.any(np.diff(times) <= 0):
            raise ValueError("time_from_start must be >= 0 and strictly increase")
        object.__setattr__(self, "times_s", times)
        object.__setattr__(self, "positions", pos)


def trajectory_points(
    actions: np.ndarray,
    joint_names: Sequence[str],
    step_period_s: float,
    limits: JointLimits = JointLimits(),
    start_time_ns: int = 0,
) -> tuple[TimedTrajectory, int]:
    """A trajectory from a (horizon, action_dim) chunk: point i at (i + 1) x step period after the start.

    Returns the trajectory and how many positions were clamped. Raises ValueError for an empty chunk, fewer
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
    times = (np.arange(values.shape[0]) + 1) * step_period_s
    return TimedTrajectory(tuple(str(j) for j in joint_names), times, positions, int(start_time_ns)), clamped
