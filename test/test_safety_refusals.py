"""What the guard says about what it did (no ROS): refused chunks counted by output, joint and reason; clamps
by more than the tolerance told apart from the small ones a good policy makes at a range's end; the first point
of a trajectory no faster than the limit from the joints as measured; a repeated hold stays where it held."""

from __future__ import annotations

import numpy as np
import pytest

from oxygen_ros.runtime.outputs import OutputSpec
from oxygen_ros.runtime.safety import RANGE_TOLERANCE, SafetyGuard, limits_of_outputs, refusal_line
from oxygen_ros.runtime.trajectory import TimedTrajectory

ARM = OutputSpec("arm", "joint_trajectory", "/arm", (0, 1), ("j1", "j2"))
GRIPPER = OutputSpec("gripper", "float64_array", "/gripper", (2,), ("g",))


def _guard(**values) -> SafetyGuard:
    limits = limits_of_outputs([ARM, GRIPPER], {"limit_joints": ["j1", "j2", "g"], "limit_max_velocity": [1.0, 1.0, 0.0],
                                                "limit_max_distance": [0.0, 0.0, 0.0], "limit_lower": [-1, -1, 0],
                                                "limit_upper": [1, 1, 1], **values})  # fmt: skip
    return SafetyGuard([ARM, GRIPPER], limits, 0.1, blend_s=0.0)


def test_refused_chunks_are_counted_by_output_joint_and_reason() -> None:
    guard = _guard()
    far = {"arm": np.array([[0.0, 3.5], [0.0, 0.0]]), "gripper": np.array([[0.5], [0.5]])}
    nan = {"arm": np.array([[np.nan, 0.0]]), "gripper": np.array([[np.inf]])}
    good = {"arm": np.array([[0.5, 0.5]]), "gripper": np.array([[0.5]])}
    assert "j2 commanded 3.5" in str(guard.check_chunk(far))
    assert guard.check_chunk(far) is not None and guard.check_chunk(nan) is not None
    assert guard.check_chunk(good) is None
    assert guard.refusals.chunks == 3
    assert guard.refusals.snapshot() == {("arm", "j2", "out_of_range"): 2, ("arm", "j1", "non_finite"): 1,
                                         ("gripper", "g", "non_finite"): 1}  # fmt: skip
    summary = guard.refusals.summary()
    assert summary["by_joint"] == {"arm/j1/non_finite": 1, "arm/j2/out_of_range": 2, "gripper/g/non_finite": 1}
    assert refusal_line(summary) == guard.refusals.line() == (
        "3 chunks refused (arm/j1 non_finite x1, arm/j2 out_of_range x2, gripper/g non_finite x1)")
    assert refusal_line({"chunks": 0}) == "" and refusal_line(None) == ""


def test_a_clamp_beyond_the_tolerance_is_told_apart_from_a_small_one() -> None:
    guard = _guard()
    guard.measured.put(["g"], [1.0], 0)
    guard.stream(GRIPPER, np.array([1.0 + 0.5 * RANGE_TOLERANCE]), 0)  # just past the open end: rounding
    counts = guard.hits.snapshot()
    assert counts[("gripper", "g", "range")] == 1 and ("gripper", "g", "range_far") not in counts
    guard.stream(GRIPPER, np.array([1.0 + 3 * RANGE_TOLERANCE]), 100_000_000)
    assert guard.hits.snapshot()[("gripper", "g", "range_far")] == 1
    timed = TimedTrajectory(("j1", "j2"), np.array([0.1, 0.2]), np.array([[0.0, 1.01], [0.0, 1.5]]), 0)
    guard.measured.put(["j1", "j2"], [0.0, 0.9], 0)
    guard.trajectory(ARM, timed, 0)
    counts = guard.hits.snapshot()
    assert counts[("arm", "j2", "range")] == 2 and counts[("arm", "j2", "range_far")] == 1


@pytest.mark.parametrize("lag", [0.05, 0.3])
def test_the_first_point_is_no_faster_than_the_limit_from_the_measured_joints(lag: float) -> None:
    """The arm lags its last trajectory by ``lag`` rad: a new trajectory's first point, timed from where the
    controller has the joints, would be faster than the limit from where they are."""
    guard = _guard()
    guard.measured.put(["j1", "j2"], [0.0, 0.0], 0)
    first = TimedTrajectory(("j1", "j2"), np.array([0.1, 0.2, 0.3, 0.4, 0.5]),
                            np.array([[0.1 * k, 0.0] for k in range(1, 6)]), 0)  # 1 rad/s: at the limit
    assert guard.trajectory(ARM, first, 0) is not None
    now = 300_000_000  # the controller has j1 at 0.3; the arm lags behind it
    guard.measured.put(["j1", "j2"], [0.3 - lag, 0.0], now)
    nxt = TimedTrajectory(("j1", "j2"), np.array([0.1, 0.2]), np.array([[0.4, 0.0], [0.5, 0.0]]), now)
    out = guard.trajectory(ARM, nxt, now)
    assert out is not None
    speed_from_measured = abs(out.positions[0, 0] - (0.3 - lag)) / out.times_s[0]
    assert speed_from_measured <= 1.0 + 1e-9
    assert guard.hits.snapshot()[("arm", "j1", "speed")] >= 1  # the re-timing acted, and was counted


def test_a_repeated_hold_stays_where_the_first_one_held() -> None:
    guard = _guard()
    guard.measured.put(["j1", "j2"], [0.2, -0.1], 0)
    first = guard.hold_command(ARM, 0)
    guard.measured.put(["j1", "j2"], [0.25, -0.12], 10**8)  # the arm sags a little under the hold
    guard.hold("bad_output", "again", 10**8)
    assert guard.hold_command(ARM, 10**8).tolist() == first.tolist() == [0.2, -0.1]
