"""The guard's arithmetic at the edges: step scaling, trajectory re-timing, velocity and twist caps, and the
guard's hold and resume (no ROS)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oxygen_ros.runtime.outputs import OutputSpec
from oxygen_ros.runtime.safety import OutputLimits, SafetyGuard, limit_table_problems, limits_of_outputs, scale_step
from oxygen_ros.runtime.safety.retime import guard_positions, guard_twist, guard_velocities
from oxygen_ros.runtime.trajectory import TimedTrajectory

INF = math.inf


# ---------------------------------------------------------------------------------------- scaling
def test_a_step_exactly_at_its_limit_is_unchanged() -> None:
    out, binding = scale_step(np.array([0.0, 1.0]), np.array([0.5, 1.2]), np.array([0.5, 0.2]))
    assert np.array_equal(out, [0.5, 1.2]) and not binding.any()


def test_a_zero_length_step_is_unchanged() -> None:
    out, binding = scale_step(np.array([0.3, -0.2]), np.array([0.3, -0.2]), np.array([0.0, 0.0]))
    assert np.array_equal(out, [0.3, -0.2]) and not binding.any()


def test_a_step_beyond_a_limit_keeps_its_direction() -> None:
    out, binding = scale_step(np.zeros(3), np.array([1.0, 0.5, -2.0]), np.array([0.1, INF, 1.0]))
    assert out == pytest.approx([0.1, 0.05, -0.2])  # one factor (0.1) for every joint: the same direction
    assert binding.tolist() == [True, False, False]
    assert np.all(np.abs(out) <= [0.1, INF, 1.0])


def test_a_joint_without_a_limit_sets_no_bound() -> None:
    out, binding = scale_step(np.zeros(2), np.array([100.0, 0.0]), np.array([INF, 0.01]))
    assert out.tolist() == [100.0, 0.0] and not binding.any()


# ------------------------------------------------------------------------------------- re-timing
def _retime(times, positions, reference, vmax, dmax=INF, lo=-INF, hi=INF, start=0.0):
    n = np.asarray(positions).shape[1]
    full = lambda x: np.full(n, x) if np.isscalar(x) else np.asarray(x, dtype=float)  # noqa: E731
    return guard_positions(np.asarray(times, float), np.asarray(positions, float), start_s=start,
                           reference=None if reference is None else np.asarray(reference, float),
                           max_velocity=full(vmax), max_distance=full(dmax), lower=full(lo), upper=full(hi))


def test_a_trajectory_within_its_speed_keeps_its_times() -> None:
    times, pos, hits = _retime([0.1, 0.2], [[0.1], [0.2]], [0.0], 1.0)  # exactly 1 rad/s: at the limit
    assert times.tolist() == pytest.approx([0.1, 0.2]) and pos[:, 0].tolist() == pytest.approx([0.1, 0.2])
    assert not hits["speed"].any()


def test_a_fast_trajectory_is_re_timed_and_cut_at_its_end() -> None:
    # 1 rad in 0.1 s steps at 2 rad/s: each 0.25 rad step takes 0.125 s; past the chunk's end (0.4 s) points are cut.
    times, pos, hits = _retime([0.1, 0.2, 0.3, 0.4], [[0.25], [0.5], [0.75], [1.0]], [0.0], 2.0)
    assert times.tolist() == pytest.approx([0.125, 0.25, 0.375])
    assert pos[:, 0].tolist() == pytest.approx([0.25, 0.5, 0.75])  # the path unchanged, only later
    assert hits["speed"][0] == 3
    assert np.all(np.abs(np.diff(np.concatenate([[0.0], pos[:, 0]]))) / np.diff(np.concatenate([[0.0], times])) <= 2.0 + 1e-9)


def test_re_timing_follows_the_slowest_joint_and_keeps_the_direction() -> None:
    times, pos, hits = _retime([0.1], [[1.0, 0.1]], [0.0, 0.0], [INF, 0.5])
    assert times[0] == pytest.approx(0.2) and pos[0].tolist() == pytest.approx([1.0, 0.1])
    assert hits["speed"].tolist() == [0, 1]


def test_the_first_point_is_shortened_to_the_distance_from_the_measured_position() -> None:
    times, pos, hits = _retime([0.1, 0.2], [[1.0, -1.0], [1.0, -1.0]], [0.2, 0.0], INF, dmax=0.1)
    assert pos[0] == pytest.approx([0.28, -0.1])  # the step (0.8, -1.0) scaled by 0.1: its direction kept
    assert np.all(np.abs(pos[0] - [0.2, 0.0]) <= 0.1 + 1e-12)
    assert np.all(np.abs(pos[1] - pos[0]) <= 0.1 + 1e-12)  # each point within reach of the one before
    assert hits["distance"].sum() == 2


def test_positions_are_clamped_into_the_range_first() -> None:
    times, pos, hits = _retime([0.1], [[2.0, -3.0]], [0.0, 0.0], INF, lo=-1.0, hi=1.0)
    assert pos[0].tolist() == [1.0, -1.0] and hits["range"].tolist() == [1, 1]


def test_without_a_reference_the_first_point_is_only_clamped() -> None:
    times, pos, _ = _retime([0.1, 0.2], [[5.0], [5.05]], None, 1.0)
    assert pos[:, 0].tolist() == [5.0, 5.05] and times.tolist() == pytest.approx([0.1, 0.2])


# -------------------------------------------------------------------------------- velocities, twists
def test_velocities_are_capped_along_their_direction_and_in_their_change() -> None:
    rows, hits = guard_velocities(np.array([[4.0, 2.0], [4.0, 2.0]]), 0.1, previous=np.zeros(2),
                                  max_velocity=np.array([2.0, INF]), max_acceleration=10.0)  # fmt: skip
    assert rows[0] == pytest.approx([1.0, 0.5])  # (2, 1) from the speed cap, then at most 1 rad/s per 0.1 s
    assert rows[1] == pytest.approx([2.0, 1.0])
    assert hits["speed"][0] == 2 and hits["acceleration"][0] == 1


def test_no_acceleration_limit_and_no_time_since_the_last_command_change_nothing() -> None:
    out, hits = guard_twist(np.array([0.3, 0.0, 0.0, 0.0, 0.0, 0.1]), 0.0, previous=np.zeros(6), max_linear=INF,
                            max_angular=INF, max_acceleration=INF)  # fmt: skip
    assert out.tolist() == [0.3, 0.0, 0.0, 0.0, 0.0, 0.1] and not hits["acceleration"].any()
    rows, _ = guard_velocities(np.array([[1.0, -1.0]]), 0.0, previous=np.zeros(2), max_velocity=np.array([INF, INF]),
                               max_acceleration=INF)  # fmt: skip
    assert rows.tolist() == [[1.0, -1.0]]


def test_a_twist_is_capped_in_linear_and_angular_speed() -> None:
    out, hits = guard_twist(np.array([3.0, 4.0, 0.0, 0.0, 0.0, 0.2]), 0.05, previous=np.zeros(6), max_linear=1.0,
                            max_angular=1.0, max_acceleration=INF)  # fmt: skip
    assert out == pytest.approx([0.6, 0.8, 0.0, 0.0, 0.0, 0.2])
    assert hits["speed"][:3].all() and not hits["speed"][3:].any()


# ------------------------------------------------------------------------------------- the guard
ARM = OutputSpec("arm", "joint_trajectory", "/arm", (0, 1), ("j1", "j2"))
GRIPPER = OutputSpec("gripper", "float64_array", "/gripper", (2,), ("g",))
VEL = OutputSpec("vel", "float64_array", "/vel", (0, 1), ("j1", "j2"), "velocity")


def _guard(*specs: OutputSpec, **values) -> SafetyGuard:
    limits = limits_of_outputs(specs, {"limit_joints": ["j1", "j2", "g"], "limit_max_velocity": [1.0, 1.0, 0.0],
                                       "limit_max_distance": [0.2, 0.2, 0.0], "limit_lower": [-1, -1, 0],
                                       "limit_upper": [1, 1, 1], **values})  # fmt: skip
    return SafetyGuard(specs, limits, 0.1, blend_s=0.0)


def test_limit_parameters_are_checked() -> None:
    assert limit_table_problems({"limit_joints": ["a", "b"], "limit_max_velocity": [1.0]}, 1)
    assert limit_table_problems({"limit_joints": ["a"], "limit_lower": [1.0], "limit_upper": [0.0]}, 1)
    assert limit_table_problems({"limit_joints": ["a"], "limit_max_velocity": [-1.0]}, 1)
    assert not limit_table_problems({"limit_joints": ["a"], "limit_max_velocity": [0.0]}, 1)


def test_a_joint_without_limits_passes_its_trajectory_unchanged() -> None:
    guard = SafetyGuard([ARM], {"arm": OutputLimits.none(ARM)}, 0.1, blend_s=0.0)
    timed = TimedTrajectory(("j1", "j2"), np.array([0.1, 0.2]), np.array([[9.0, 9.0], [-9.0, 9.0]]), 0)
    assert guard.trajectory(ARM, timed, 10) is timed


def test_the_guard_re_times_from_the_measured_position_and_counts_per_joint() -> None:
    guard = _guard(ARM)
    guard.measured.put(["j1", "j2"], [0.0, 0.0], 0)
    timed = TimedTrajectory(("j1", "j2"), np.array([0.1, 0.2, 0.3]), np.array([[0.5, 0.0], [0.6, 0.0], [0.7, 0.0]]), 0)
    out = guard.trajectory(ARM, timed, 0)
    assert out is not None and abs(out.positions[0, 0]) <= 0.2 + 1e-12  # within reach of the measured position
    steps = np.diff(np.concatenate([[[0.0, 0.0]], out.positions]), axis=0)
    assert np.all(np.abs(steps) / np.diff(np.concatenate([[0.0], out.times_s]))[:, None] <= 1.0 + 1e-9)
    counts = guard.hits.snapshot()
    assert counts[("arm", "j1", "distance")] >= 1 and ("arm", "j2", "distance") not in counts


def test_a_chunk_far_out_of_range_or_not_finite_is_no_command() -> None:
    guard = _guard(ARM)
    assert guard.chunk_problem(ARM, np.array([[0.5, 1.5]])) is None  # beyond the range by a quarter: clamped
    assert "beyond its range" in str(guard.chunk_problem(ARM, np.array([[0.5, 3.5]])))
    assert "NaN" in str(guard.chunk_problem(ARM, np.array([[np.nan, 0.0]])))


def test_streamed_positions_step_at_most_their_speed_from_the_last_command() -> None:
    guard = _guard(GRIPPER, limit_max_velocity=[1.0, 1.0, 2.0])
    guard.measured.put(["g"], [0.0], 0)
    first = guard.stream(GRIPPER, np.array([1.0]), 0)  # no step time yet: one step period, 0.2
    second = guard.stream(GRIPPER, np.array([1.0]), 50_000_000)  # 0.05 s later: 0.1 more
    assert first.tolist() == pytest.approx([0.2]) and second.tolist() == pytest.approx([0.3])


def test_a_hold_resumes_velocities_from_zero() -> None:
    guard = _guard(VEL, output_max_acceleration=[5.0])
    assert guard.state.state == "HOLD"  # nothing commanded yet
    for k in range(5):
        guard.stream(VEL, np.array([1.0, 1.0]), k * 100_000_000)
    assert guard.state.resumed() and guard.state.state == "RUN"
    assert guard.hold("test", "a test hold", now_ns=9 * 10**8) and not guard.hold("test", "again")  # said once
    assert guard.hold_command(VEL).tolist() == [0.0, 0.0]
    after = guard.stream(VEL, np.array([1.0, 1.0]), 10**9)
    assert after == pytest.approx([0.5, 0.5])  # from zero, at most 5 rad/s² x 0.1 s
    assert guard.state.resumed()


def test_resuming_blends_a_trajectory_from_the_measured_position() -> None:
    spec = ARM
    guard = SafetyGuard([spec], {"arm": OutputLimits.none(spec)}, 0.1, blend_s=0.4)
    guard.measured.put(["j1", "j2"], [0.0, 0.0], 0)
    timed = TimedTrajectory(("j1", "j2"), np.arange(1, 5) * 0.1, np.ones((4, 2)), 0)
    out = guard.trajectory(spec, timed, 0)
    assert out.positions[:, 0] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    again = guard.trajectory(spec, timed, 0)  # not resuming any more, no limits: as it is
    assert again is timed


def test_a_streamed_position_never_steps_beyond_max_velocity_when_the_measurement_lags() -> None:
    """The distance from a measurement that lags the commands (a busy joint-state path) is shortened before the step
    from the last command: every step stays within max_velocity · dt, and the command moves towards the measured
    joints' neighbourhood (shortening the distance last pulled all joints at once, steps of twice the limit)."""
    spec = OutputSpec("arm", "joint_group", "/robot/commands/joint_group", tuple(range(3)), ("a", "b", "c"), group="arm")
    limits = OutputLimits("arm", spec.joints, (math.pi,) * 3, (0.5,) * 3, (-3.0,) * 3, (3.0,) * 3)
    guard = SafetyGuard([spec], {"arm": limits}, 0.02, 0.0)
    rng = np.random.default_rng(0)
    sent = [np.zeros(3)] * 30
    t = 0
    for _ in range(3000):
        t += 20_000_000
        guard.measured.put(list(spec.joints), sent[-30], t)  # the joints as they were 30 commands ago
        sent.append(guard.stream(spec, sent[-1] + rng.uniform(-1, 1, 3), t))
    steps = np.abs(np.diff(np.array(sent[30:]), axis=0))
    assert steps.max() <= math.pi * 0.02 + 1e-12
