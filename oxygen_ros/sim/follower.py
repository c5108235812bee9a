"""A joint trajectory follower with ros2_control ``joint_trajectory_controller`` semantics, no ROS types.

* A trajectory's points are timed from its start instant: ``start_time_ns`` 0 means "when received".
* A new trajectory replaces the current one from its start instant: before it, the old one still runs.
* Points whose time has already passed on receipt are skipped: the setpoint goes from where the joints are
  now straight to the first point still ahead. A trajectory whose every point is past is rejected, as are
  trajectories for unknown or missing joints.
* Between points the setpoint is interpolated linearly; after the last point it holds the last point.
* The joints follow the setpoint within their position limits and at most at their velocity limits
  (a setpoint that moves faster is tracked with a lag, never jumped to).

It also takes a velocity ``forward_command_controller``'s commands (``command_velocity``): the named joints
move at the commanded velocities (within their limits) until the next command; a trajectory takes them back.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from oxygen_ros.runtime.trajectory import TimedTrajectory

NS = 1_000_000_000
KNOT_TOLERANCE_S = 1e-9  # a time this close to a knot's is the knot's (clock stamps are whole nanoseconds)


class TrajectoryRejected(ValueError):
    """The trajectory cannot be executed; the current one keeps running."""


class TrajectoryFollower:
    def __init__(
        self,
        joint_names: Sequence[str],
        positions: np.ndarray,
        max_velocity: np.ndarray,
        lower: np.ndarray | None = None,
        upper: np.ndarray | None = None,
        now_s: float = 0.0,
    ) -> None:
        self.joint_names = tuple(joint_names)
        n = len(self.joint_names)
        self.positions = np.asarray(positions, dtype=np.float64).copy()
        self.max_velocity = np.asarray(max_velocity, dtype=np.float64)
        self.lower = np.full(n, -np.inf) if lower is None else np.asarray(lower, dtype=np.float64)
        self.upper = np.full(n, np.inf) if upper is None else np.asarray(upper, dtype=np.float64)
        if not (self.positions.shape == self.max_velocity.shape == self.lower.shape == self.upper.shape == (n,)):
            raise ValueError("positions, velocity and position limits need one value per joint")
        # The setpoint as knots (absolute seconds, positions); empty = hold the current positions.
        self._times = np.zeros(0)
        self._knots = np.zeros((0, n))
        self._now = now_s  # the time of `positions`
        self._velocity = np.zeros(n)  # commanded velocities of the joints in velocity mode
        self._by_velocity = np.zeros(n, dtype=bool)  # joints driven by velocity commands, not the setpoint

    # ------------------------------------------------------------------------------------ commands
    def command(self, trajectory: TimedTrajectory, now_s: float) -> None:
        """Receive a trajectory at ``now_s``; raises `TrajectoryRejected` saying why it is refused."""
        self.update(now_s)
        order = self._order(trajectory.joint_names)
        positions = trajectory.positions[:, order]
        start = trajectory.start_time_ns / NS if trajectory.start_time_ns else now_s
        times = start + trajectory.times_s
        ahead = times > now_s
        if not np.any(ahead):
            raise TrajectoryRejected("every point of the trajectory is already in the past")
        times, positions = times[ahead], positions[ahead]
        if start > now_s:  # the current motion runs until the new start instant, then the new one takes over
            keep = self._times < start
            anchor_t, anchor_p = start, self.setpoint(start)
            old_t, old_p = self._times[keep], self._knots[keep]
            if not keep.any():  # nothing commanded before it: hold where the joints are now
                old_t, old_p = np.array([now_s]), self.positions[None]
        else:
            anchor_t, anchor_p = now_s, self.positions.copy()
            old_t, old_p = np.zeros(0), np.zeros((0, len(self.joint_names)))
        if times[0] <= anchor_t:  # a first point exactly at the start instant replaces the anchor
            anchor_t, anchor_p = times[0], positions[0]
            times, positions = times[1:], positions[1:]
        self._times = np.concatenate([old_t, [anchor_t], times])
        self._knots = np.concatenate([old_p, anchor_p[None], positions])
        self._by_velocity[:] = False

    def command_velocity(self, joint_names: Sequence[str], velocities: Sequence[float], now_s: float) -> None:
        """A velocity command at ``now_s`` (forward_command_controller: applied at once, held until the next);
        raises `TrajectoryRejected` for unknown joints, a length mismatch or non-finite values."""
        values = np.asarray(velocities, dtype=np.float64)
        unknown = sorted(set(joint_names) - set(self.joint_names))
        if unknown or values.shape != (len(joint_names),) or not np.all(np.isfinite(values)):
            raise TrajectoryRejected(f"velocity command of {values.size} values for joints {list(joint_names)} "
                                     f"(unknown {unknown}) does not fit the robot's {list(self.joint_names)}")  # fmt: skip
        self.update(now_s)
        index = [self.joint_names.index(name) for name in joint_names]
        self._velocity[index] = values
        self._by_velocity[index] = True

    def _order(self, names: Sequence[str]) -> list[int]:
        if sorted(names) != sorted(self.joint_names):
            missing = sorted(set(self.joint_names) - set(names))
            unknown = sorted(set(names) - set(self.joint_names))
            raise TrajectoryRejected(f"joint names do not match the robot's (missing {missing}, unknown {unknown})")
        index = {n: i for i, n in enumerate(names)}
        return [index[n] for n in self.joint_names]

    # ------------------------------------------------------------------------------------- motion
    def setpoint(self, t_s: float) -> np.ndarray:
        """The commanded positions at time ``t_s`` (linear between knots, held outside them). At a knot's time
        (within a nanosecond) its positions exactly: the same trajectory gives the same setpoints whatever the
        clock's origin (float seconds since different origins round differently between knots)."""
        if self._times.size == 0:
            return self.positions.copy()
        at = np.flatnonzero(np.abs(self._times - t_s) < KNOT_TOLERANCE_S)
        if at.size:
            return self._knots[at[-1]].copy()
        return np.array([np.interp(t_s, self._times, self._knots[:, j]) for j in range(len(self.joint_names))])

    def update(self, now_s: float) -> np.ndarray:
        """Advance the joints to ``now_s``: towards the setpoint, within position and velocity limits."""
        dt = max(0.0, now_s - self._now)
        self._now = now_s
        target = np.clip(self.setpoint(now_s), self.lower, self.upper)
        step = np.clip(target - self.positions, -self.max_velocity * dt, self.max_velocity * dt)
        driven = np.clip(self._velocity, -self.max_velocity, self.max_velocity) * dt
        moved = self.positions + np.where(self._by_velocity, driven, step)
        self.positions = np.where(self._by_velocity, np.clip(moved, self.lower, self.upper), moved)
        return self.positions.copy()

    def block(self, measured: np.ndarray, joints: int) -> None:
        """The first ``joints`` joints were stopped at ``measured`` by an obstacle: continue from there."""
        self.positions[:joints] = measured[:joints]

    @property
    def end_time_s(self) -> float | None:
        """When the last point is reached (None with no trajectory)."""
        return float(self._times[-1]) if self._times.size else None
