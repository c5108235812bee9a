"""Joint states from several topics (one per arm, names without the arm's prefix), position targets one step
ahead of the measured joints, the Robotiq driver's knuckle angle and the policy's reset pose. No DDS here."""

from __future__ import annotations

import numpy as np
import pytest

import robot_references as ref
from oxygen_ros.embodiment import ConversionError, parse_conversions
from oxygen_ros.interface import settings as S
from oxygen_ros.interface.inputs import InputStore, ObservationError
from oxygen_ros.interface.joint_sources import JointSourceError, joint_sources
from oxygen_ros.runtime.outputs import build_outputs, output_problems, step_targets
from oxygen_ros.runtime.reset_pose import OPENPI_ALOHA_RESET_POSE, reset_pose, reset_targets

ARM = ["waist", "shoulder", "elbow"]
NAMES = [f"{side}_{j}" for side in ("left", "right") for j in ARM]
TOPICS = ["/puppet_left/joint_states", "/puppet_right/joint_states"]


def test_each_joint_comes_from_the_topic_its_prefix_names() -> None:
    left, right = joint_sources(TOPICS, ["left_", "right_"], NAMES)
    assert (left.topic, left.indices, left.names) == (TOPICS[0], (0, 1, 2), tuple(ARM))
    assert (right.topic, right.indices, right.names) == (TOPICS[1], (3, 4, 5), tuple(ARM))
    (only,) = joint_sources(["/joint_states"], [], NAMES)  # one topic: every joint, as named
    assert only.indices == tuple(range(6)) and only.names == tuple(NAMES)
    # The longest prefix wins; an empty one takes the rest.
    base, tool = joint_sources(["/arm", "/tool"], ["", "tool_"], ["j1", "tool_j1"])
    assert (base.names, tool.names) == (("j1",), ("j1",))


@pytest.mark.parametrize(("topics", "prefixes", "names", "message"), [
    (TOPICS, ["left_"], NAMES, "one entry per joint-state topic"),
    (TOPICS, ["left_", "left_"], NAMES, "must differ between topics"),
    (TOPICS, ["left_", "right_"], [*NAMES, "torso"], "'torso' starts with none"),
    (TOPICS, ["left_", "right_"], NAMES[:3], "provides none of joint_names"),
    ([TOPICS[0], TOPICS[0]], ["left_", "right_"], NAMES, "topics repeat"),
])  # fmt: skip
def test_joint_sources_that_do_not_divide_the_joints_are_refused(topics, prefixes, names, message) -> None:
    with pytest.raises(JointSourceError, match=message):
        joint_sources(topics, prefixes, names)


def _store() -> InputStore:
    parts = [(t, s.indices) for t, s in zip(TOPICS, joint_sources(TOPICS, ["left_", "right_"], NAMES))]
    store = InputStore(["/cam"], [False], [(0, 0)], use_state=True, state_parts=parts)
    store.put_image(0, np.zeros((2, 2, 3), np.uint8), 1_000, 1_000)
    store.put_instruction("fold the towel", 1_000)
    return store


def test_the_state_is_whole_only_when_every_arm_reported_and_is_fresh() -> None:
    store = _store()
    store.put_joint_state(np.array([1.0, 2.0, 3.0]), 1_000, 1_000, source=0)
    with pytest.raises(ObservationError, match="puppet_right") as missing:
        store.snapshot(1_000, 10_000)
    assert missing.value.kind == "missing_joint_state"
    store.put_joint_state(np.array([4.0, 5.0, 6.0]), 1_000, 1_000, source=1)
    assert store.snapshot(1_000, 10_000).state.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    store.put_image(0, np.zeros((2, 2, 3), np.uint8), 30_000, 30_000)
    store.put_joint_state(np.array([1.5, 2.5, 3.5]), 30_000, 30_000, source=0)  # the right arm's state is now old
    with pytest.raises(ObservationError, match="puppet_right") as stale:
        store.snapshot(30_000, 10_000)
    assert stale.value.kind == "stale_joint_state"
    store.reject_joint_state("lacks joints ['waist']", 30_000, 30_000, source=1)
    with pytest.raises(ObservationError, match="puppet_right.*lacks joints") as bad:
        store.snapshot(30_000, 10_000)
    assert bad.value.kind == "rejected_joint_state"
    assert set(store.ages_s(30_000)) == {"/cam", *(f"joint_states {t}" for t in TOPICS)}


def test_a_clock_jump_drops_every_arms_state() -> None:
    store = _store()
    for source in (0, 1):
        store.put_joint_state(np.zeros(3), 1_000, 1_000, source=source)
    assert store.restart(1_000, 10**12) == 3  # the image and both arms
    store.put_image(0, np.zeros((2, 2, 3), np.uint8), 10**12, 10**12)
    store.put_joint_state(np.ones(3), 10**12, 10**12, source=0)
    with pytest.raises(ObservationError) as after:
        store.snapshot(10**12, 10_000)
    assert after.value.kind == "after_clock_jump"


def test_position_step_targets_are_the_measured_joints_plus_the_step() -> None:
    (arm,) = build_outputs(["arm"], ["float64_array"], ["/cmd"], ["0..1"], ["b,a"], ["position_step"],
                           conversions=["2x linear(0.2, 0.0) clip(-1, 1)"])  # fmt: skip
    measured = np.array([20.0, 10.0])  # joints b, a as measured
    steps = arm.values(np.array([1.7, -0.5]))
    assert step_targets(steps, measured).tolist() == pytest.approx([20.2, 9.9])
    assert step_targets(steps, None) is None  # no measured position: no command
    (bad,) = build_outputs(["arm"], ["joint_trajectory"], ["/cmd"], ["0"], ["a"], ["position_step"])
    assert any("position_step needs a float64_array" in p for p in output_problems([bad], 1))


def test_a_config_steps_only_joints_it_measures() -> None:
    values = {"camera_topics": ["/cam"], "joint_names": ["a"], "output_names": ["arm"], "output_types": ["float64_array"],
              "output_topics": ["/cmd"], "output_dims": ["0..1"], "output_joints": ["a,b"],
              "output_interfaces": ["position_step"]}  # fmt: skip
    assert any("position_step joints ['b'] are not in joint_names" in p for p in S.cross_checks({**S.default_values(), **values}))


def test_the_robotiq_knuckle_reads_open_as_open() -> None:
    knuckle = parse_conversions("robotiq_knuckle(0.7929) clip(0, 1)", "joint_conversions")
    # The driver: 0 rad open, 0.7929 rad closed; DROID's gripper position: 0 open, 1 closed.
    assert knuckle.to_model(np.array([[ref.robotiq_knuckle(0.085)], [ref.robotiq_knuckle(0.0)]])).ravel().tolist() == [0.0, 1.0]
    assert knuckle.to_robot(np.array([[0.0], [1.0], [1.4]])).ravel().tolist() == [0.0, 0.7929, 0.7929]
    with pytest.raises(ConversionError, match="not a Robotiq 2F-85 knuckle angle"):
        parse_conversions("robotiq_knuckle(85)", "joint_conversions")


def test_the_reset_pose_goes_to_each_arm_of_as_many_joints() -> None:
    outputs = build_outputs(["left", "grip", "right"], ["joint_trajectory", "float64_array", "joint_trajectory"],
                            ["/l", "/g", "/r"], ["0..5", "6", "7..12"], [",".join("abcdef"), "g", ",".join("uvwxyz")])  # fmt: skip
    pose = reset_pose({"reset_pose": list(OPENPI_ALOHA_RESET_POSE)})
    assert pose == ref.ALOHA_RESET_POSE
    assert [(spec.name, p) for spec, p in reset_targets(pose, outputs)] == [("left", pose), ("right", pose)]
    assert reset_pose({"reset_pose": []}) is None and reset_targets(None, outputs) == []
