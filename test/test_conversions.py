"""Unit conversions as configuration (oxygen_ros/embodiment/conversions.py) against the robots' own formulas
(test/robot_references.py), and their refusals at configure: one line that names the key."""

from __future__ import annotations

import math

import numpy as np
import pytest

import robot_references as ref
from oxygen_ros.embodiment import ConversionError, parse_conversions
from oxygen_ros.interface import settings as S
from oxygen_ros.runtime.outputs import OutputConfigError, build_outputs


def one(text: str) -> tuple:
    c = parse_conversions(text, "k")
    return (lambda x: c.to_robot(np.array([[x]]))[0, 0]), (lambda x: c.to_model(np.array([[x]]))[0, 0])


def test_aloha_gripper_converters_are_real_envs() -> None:
    to_joint, from_joint = one("aloha_gripper_joint")
    assert to_joint(0.0) == pytest.approx(-0.6213, abs=1e-12) and to_joint(1.0) == pytest.approx(1.4910, abs=1e-12)
    _, from_position = one("aloha_gripper_position")
    assert from_position(0.058) == pytest.approx(1.0, abs=1e-12) and from_position(0.01844) == pytest.approx(0.0, abs=1e-12)
    for x in np.random.default_rng(0).uniform(-0.5, 1.5, 50):
        assert to_joint(x) == pytest.approx(ref.puppet_gripper_joint_unnormalize(x), abs=1e-12)
        assert from_joint(to_joint(x)) == pytest.approx(x, abs=1e-12)
        metres = 0.01 + 0.06 * (x + 0.5) / 2
        assert from_position(metres) == pytest.approx(ref.puppet_gripper_position_normalize(metres), abs=1e-12)


def test_linear_and_clip_both_ways() -> None:
    c = parse_conversions("linear(3.0, 0.0) clip(-1, 1); 2x linear(-0.085, 0.085) clip(0, 1)", "k")
    np.testing.assert_allclose(c.to_robot(np.array([0.5, 1.0, 0.0])), [1.5, 0.0, 0.085])
    np.testing.assert_allclose(c.to_robot(np.array([1.7, 2.0, -3.0])), [3.0, 0.0, 0.085])  # clipped on the model side
    np.testing.assert_allclose(c.to_model(np.array([1.5, 0.0, 0.0425])), [0.5, 1.0, 0.5])
    np.testing.assert_allclose(c.to_model(np.array([6.0, 0.0, 0.1])), [1.0, 1.0, 0.0])  # clipped after converting
    assert c.describe() == "linear(3.0, 0.0) clip(-1, 1); linear(-0.085, 0.085) clip(0, 1); linear(-0.085, 0.085) clip(0, 1)"


@pytest.mark.parametrize(("mode", "drive_mode"), [("degrees", 0), ("range_m100_100", 0), ("range_m100_100", 1),
                                                  ("range_0_100", 0), ("range_0_100", 1)])  # fmt: skip
def test_lerobot_converters_give_lerobots_ticks_and_values(mode: str, drive_mode: int) -> None:
    """Through the driver's radians, the tick is LeRobot's (_unnormalize) and the value LeRobot's (_normalize)."""
    lo, hi, zero = 812, 3307, 2048
    text = f"lerobot_degrees({lo}, {hi}, {zero})" if mode == "degrees" else f"lerobot_{mode}({lo}, {hi}, {drive_mode}, {zero})"
    to_robot, to_model = one(text)
    values = list(np.random.default_rng(1).uniform(-160, 160, 200)) + [-130.0, -100.0, -0.4, 0.0, 0.4, 100.0, 120.0]
    for value in values:
        tick = ref.feetech_driver_tick(to_robot(value), zero)
        assert tick == ref.lerobot_unnormalize(value, mode, lo, hi, bool(drive_mode))
    for tick in [0, 500, lo, lo + 1, 1500, 2047, 2048, 2900, hi, hi + 200, 4095]:
        expected = ref.lerobot_normalize(tick, mode, lo, hi, bool(drive_mode))
        assert to_model(ref.feetech_driver_radians(tick, zero)) == pytest.approx(expected, abs=1e-9)


def test_so101_gripper_action_beyond_its_range_reaches_lerobots_tick() -> None:
    """LeRobot clamps RANGE_0_100 to 100 before ticks: an action of 120 goes to range_max, not beyond."""
    to_robot, _ = one("lerobot_range_0_100(2000, 2600, 0, 2048)")
    assert ref.feetech_driver_tick(to_robot(120.0), 2048) == ref.lerobot_unnormalize(120.0, "range_0_100", 2000, 2600) == 2600
    to_degrees, _ = one("lerobot_degrees(1000, 3094, 2048)")  # LeRobot's DEGREES: 4095 / 360 ticks per degree
    assert ref.feetech_driver_tick(to_degrees(90.0), 2048) == int(90.0 * 4095 / 360 + 2047) == 3070
    assert to_degrees(90.0) * 180 / math.pi == pytest.approx((3070 - 2048) * 360 / 4096)


@pytest.mark.parametrize(("text", "message"), [
    ("foo", "k: unknown converter 'foo'"),
    ("linear(1)", r"k: linear takes 2 arguments \(scale, offset\), got 1"),
    ("linear(FILL_IN, 0)", "k: FILL_IN placeholder left"),
    ("linear(0, 1)", "k: 'linear\\(0, 1\\)': linear scale must not be 0"),
    ("identity;", "k: empty conversion"),
    ("identity clip(1, 0)", "k: clip takes"),
    ("lerobot_degrees(3000, 1000, 2048)", "must be ticks 0 <= min < max"),
    ("lerobot_range_0_100(1000, 3000, 2, 2048)", "drive_mode must be 0 or 1"),
    ("linear(1, x)", "k: 'x' in 'linear\\(1, x\\)' is not a number"),
    ("identity(3)", "k: identity takes 0 arguments"),
])  # fmt: skip
def test_refusals_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConversionError, match=message) as info:
        parse_conversions(text, "k")
    assert "\n" not in str(info.value)


def test_output_and_joint_conversions_of_the_wrong_size_are_refused_at_configure() -> None:
    with pytest.raises(OutputConfigError, match=r"^output_conversions\[1\] \(gripper\): 2 conversions for 1 dims$"):
        build_outputs(["arm", "gripper"], ["float64_array"] * 2, ["/a", "/g"], ["0..1", "2"],
                      conversions=["2x identity", "identity; identity"])  # fmt: skip
    base = {"camera_topics": ["/cam"], "joint_names": ["a", "b"], "output_types": ["float64_array"],
            "output_names": ["arm"], "output_topics": ["/arm"], "output_dims": ["0..1"]}  # fmt: skip
    assert S.validate_values({**base, "output_conversions": ["2x identity"], "joint_conversions": ["identity"] * 2}) == []
    problems = S.validate_values({**base, "output_conversions": ["2x bogus"]})
    assert len(problems) == 1 and problems[0].startswith("output_conversions[0] (arm): unknown converter 'bogus'")
    problems = S.validate_values({**base, "joint_conversions": ["identity"]})
    assert problems == ["joint_conversions must be empty or have one entry per joint_names entry (2), got 1"]
    problems = S.validate_values({**base, "joint_conversions": ["identity", "2x identity"]})
    assert problems == ["joint_conversions[1]: one conversion per joint, got 2"]
    problems = S.validate_values({**base, "joint_conversions": ["identity", "lerobot_degrees(FILL_IN, FILL_IN, 2048)"]})
    assert problems == ["joint_conversions: a FILL_IN placeholder is left in it; set it (the config's comment says what goes there)"]


def test_a_position_output_of_a_state_joint_must_convert_as_the_state_does() -> None:
    base = {"camera_topics": ["/cam"], "joint_names": ["a", "b"], "output_types": ["joint_trajectory", "float64_array"],
            "output_names": ["arm", "grip"], "output_topics": ["/arm", "/grip"], "output_dims": ["0", "1"],
            "output_joints": ["a", "b"], "joint_conversions": ["linear(2, 0)", "identity"]}  # fmt: skip
    assert S.validate_values({**base, "output_conversions": ["linear(2, 0) clip(-1, 1)", "identity"]}) == []
    assert S.validate_values({**base, "output_conversions": ["identity", "identity"]}) == [
        "output_conversions of arm: joint a is converted as 'identity' but joint_conversions reads it as "
        "'linear(2, 0)' (one joint, one unit)"]
    # A velocity output of the same joint is another unit: no check.
    assert S.validate_values({**base, "output_conversions": ["identity", "identity"],
                              "output_interfaces": ["velocity", "position"]}) == []  # fmt: skip


def test_piecewise_curve_both_ways_and_its_refusals() -> None:
    """A measured curve: straight lines between the points, the end slopes beyond them, and back again."""
    curve = parse_conversions("piecewise(-1, -2, 0, 0, 0.5, 1.5, 1, 2) clip(-1, 1)", "k")
    model = np.array([[-1.5], [-0.5], [0.25], [0.75], [2.0]])
    assert curve.to_robot(model)[:, 0] == pytest.approx([-2.0, -1.0, 0.75, 1.75, 2.0])  # clipped to [-1, 1] first
    unclipped = parse_conversions("piecewise(0, 0, 1, 2, 2, 3)", "k")
    assert unclipped.to_robot(np.array([[3.0], [-1.0]]))[:, 0] == pytest.approx([4.0, -2.0])  # end slopes
    assert unclipped.to_model(np.array([[1.0], [2.5], [4.0]]))[:, 0] == pytest.approx([0.5, 1.5, 3.0])
    for text, message in (("piecewise(0, 0, 1)", "pairs"), ("piecewise(0, 0)", "pairs"),
                          ("piecewise(0, 0, 0, 1)", "strictly increase"), ("piecewise(0, 1, 1, 0)", "strictly increase")):
        with pytest.raises(ConversionError, match=message):
            parse_conversions(text, "k")
