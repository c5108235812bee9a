"""The trajectory follower keeps ros2_control joint_trajectory_controller semantics (DESIGN §4, §7)."""

from __future__ import annotations

import numpy as np
import pytest

from oxygen_ros.runtime.trajectory import JointLimits, TimedTrajectory, trajectory_points
from oxygen_ros.sim.follower import TrajectoryFollower, TrajectoryRejected

NAMES = ("a", "b")
FAST = np.array([100.0, 100.0])  # velocity limits that never bind


def follower(velocity: np.ndarray = FAST, now: float = 0.0) -> TrajectoryFollower:
    return TrajectoryFollower(NAMES, np.zeros(2), velocity, np.array([-5.0, -5.0]), np.array([5.0, 5.0]), now_s=now)


def traj(times: list[float], positions: list[list[float]], start_s: float = 0.0, names: tuple = NAMES) -> TimedTrajectory:
    return TimedTrajectory(names, np.array(times), np.array(positions), int(round(start_s * 1e9)))


def run(f: TrajectoryFollower, until: float, dt: float = 0.01, start: float = 0.0) -> np.ndarray:
    t = start
    while t < until - 1e-9:
        t = round(t + dt, 9)
        out = f.update(t)
    return out


def test_stamp_zero_starts_on_receipt_and_interpolates_linearly() -> None:
    f = follower(now=2.0)
    f.command(traj([1.0, 2.0], [[1.0, -1.0], [3.0, -1.0]]), now_s=2.0)  # received at t = 2
    assert np.allclose(f.setpoint(2.5), [0.5, -0.5])  # halfway from where the joints are to point 0
    assert np.allclose(f.setpoint(3.5), [2.0, -1.0])  # halfway between points 0 and 1
    assert np.allclose(f.setpoint(9.0), [3.0, -1.0])  # holds the last point
    assert np.allclose(run(f, 3.0, start=2.0), [1.0, -1.0])
    assert f.end_time_s == pytest.approx(4.0)


def test_nonzero_stamp_times_points_from_it_and_skips_past_points() -> None:
    f = follower(now=10.0)
    # Stamped at t = 9 and received at t = 10: the point at 9.5 is past and skipped; the setpoint goes from
    # the current position straight to the point at 10.5.
    f.command(traj([0.5, 1.5, 2.5], [[7.0, 7.0], [1.0, 2.0], [3.0, 4.0]], start_s=9.0), now_s=10.0)
    assert np.allclose(f.setpoint(10.25), [0.5, 1.0])
    assert np.allclose(f.setpoint(10.5), [1.0, 2.0])
    assert np.allclose(f.setpoint(11.0), [2.0, 3.0])
    assert not np.any(np.isclose([f.setpoint(t)[0] for t in np.linspace(10, 12, 41)], 7.0))  # never goes there


def test_future_stamp_keeps_the_old_trajectory_until_the_new_start() -> None:
    f = follower()
    f.command(traj([1.0], [[2.0, 2.0]]), now_s=0.0)  # 0 → 2 over one second
    f.command(traj([0.5], [[0.0, 4.0]], start_s=0.5), now_s=0.2)  # takes over at t = 0.5
    assert np.allclose(f.setpoint(0.4), [0.8, 0.8])  # still the old one
    assert np.allclose(f.setpoint(0.5), [1.0, 1.0])  # the old one's setpoint at the new start ...
    assert np.allclose(f.setpoint(0.75), [0.5, 2.5])  # ... then towards the new point
    assert np.allclose(f.setpoint(1.0), [0.0, 4.0])


def test_new_trajectory_replaces_the_old_from_where_the_joints_are() -> None:
    f = follower()
    f.command(traj([1.0, 2.0], [[1.0, 1.0], [2.0, 2.0]]), now_s=0.0)
    at = run(f, 0.5)
    assert np.allclose(at, [0.5, 0.5])
    f.command(traj([0.5], [[-1.0, 0.0]]), now_s=0.5)
    assert np.allclose(f.setpoint(0.5), at)  # no jump at the switch
    assert np.allclose(f.setpoint(1.0), [-1.0, 0.0])
    assert np.allclose(f.setpoint(1.9), [-1.0, 0.0])  # nothing of the old trajectory remains
    assert np.allclose(run(f, 1.5, start=0.5), [-1.0, 0.0])


def test_velocity_and_position_limits() -> None:
    f = follower(velocity=np.array([1.0, 0.5]))
    f.command(traj([0.1], [[3.0, 9.0]]), now_s=0.0)  # far too fast; the second joint past its limit
    assert np.allclose(run(f, 1.0), [1.0, 0.5], atol=1e-9)  # moved at the velocity limits
    assert np.allclose(run(f, 20.0, start=1.0), [3.0, 5.0])  # arrives, clamped at the position limit
    speeds = []
    g = follower(velocity=np.array([1.0, 0.5]))
    g.command(traj([0.1], [[-3.0, 3.0]]), now_s=0.0)
    prev, t = g.positions.copy(), 0.0
    for _ in range(100):
        t += 0.01
        cur = g.update(t)
        speeds.append(np.abs(cur - prev) / 0.01)
        prev = cur
    assert np.all(np.max(speeds, axis=0) <= np.array([1.0, 0.5]) + 1e-9)


def test_rejections_keep_the_current_trajectory() -> None:
    f = follower(now=5.0)
    f.command(traj([1.0], [[1.0, 1.0]]), now_s=5.0)
    with pytest.raises(TrajectoryRejected, match="past"):
        f.command(traj([0.5, 1.0], [[9.0, 9.0], [9.0, 9.0]], start_s=1.0), now_s=5.0)
    with pytest.raises(TrajectoryRejected, match="missing"):
        f.command(traj([1.0], [[9.0]], names=("a",)), now_s=5.0)
    with pytest.raises(TrajectoryRejected, match="unknown"):
        f.command(traj([1.0], [[9.0, 9.0]], names=("a", "z")), now_s=5.0)
    assert np.allclose(f.setpoint(6.0), [1.0, 1.0])
    with pytest.raises(ValueError, match="strictly increase"):
        traj([1.0, 1.0], [[0.0, 0.0], [1.0, 1.0]])


def test_joint_order_follows_the_names() -> None:
    f = follower()
    f.command(traj([1.0], [[2.0, 1.0]], names=("b", "a")), now_s=0.0)
    assert np.allclose(f.setpoint(1.0), [1.0, 2.0])


def test_trajectory_points_times_and_clamps_a_chunk() -> None:
    actions = np.array([[0.1, 9.0, 7.0], [0.2, -9.0, 7.0]], dtype=np.float32)
    t, clamped = trajectory_points(actions, NAMES, 0.25, JointLimits((-1.0, -1.0), (1.0, 1.0)), start_time_ns=5)
    assert t.times_s.tolist() == [0.25, 0.5] and t.start_time_ns == 5
    assert np.allclose(t.positions, [[0.1, 1.0], [0.2, -1.0]]) and clamped == 2
    with pytest.raises(ValueError, match="NaN"):
        trajectory_points(np.full((2, 2), np.nan), NAMES, 0.25)


def test_velocity_commands_like_a_forward_command_controller() -> None:
    """Applied at once and held until the next command, within velocity and position limits; a trajectory
    takes the joints back."""
    f = follower(velocity=np.array([1.0, 100.0]))
    f.command_velocity(["b"], [0.5], 0.0)  # joint b by velocity, a keeps its (empty) setpoint
    np.testing.assert_allclose(run(f, 1.0), [0.0, 0.5], atol=1e-9)
    f.command_velocity(["a", "b"], [3.0, -2.0], 1.0)  # a is limited to 1 rad/s
    np.testing.assert_allclose(run(f, 2.0, start=1.0), [1.0, -1.5], atol=1e-9)
    f.command_velocity(["a", "b"], [100.0, 0.0], 2.0)
    assert run(f, 20.0, start=2.0)[0] == pytest.approx(5.0)  # held at the position limit
    f.command(traj([0.5], [[0.0, 0.0]]), 20.0)
    np.testing.assert_allclose(run(f, 30.0, start=20.0), [0.0, 0.0], atol=1e-9)
    for names, values in ((["c"], [1.0]), (["a"], [1.0, 2.0]), (["a"], [float("nan")])):
        with pytest.raises(TrajectoryRejected):
            f.command_velocity(names, values, 30.0)
