"""Controller outputs: configs that do not add up are refused with one line each; over real DDS each output's
subscriber receives exactly its action dims in its message type (bimanual split, binarized gripper, velocity
trajectories, MoveIt Servo's stale-command rule)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rclpy
from geometry_msgs.msg import TwistStamped
from oxygen_ros_msgs.msg import ActionChunk
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.interface import settings as S
from oxygen_ros.interface.convert import array_to_image, stamp_to_ns
from oxygen_ros.ros.node import OxygenNode
from oxygen_ros.runtime.outputs import SERVO_TIMEOUT_S, ChunkStream, OutputConfigError, build_outputs, output_problems

from ros_helpers import Collector, FakeRuntime, make_test_node, spin_for, spin_until, wait_for_match

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"
RELIABLE = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE)
ARMS = [f"{side}_{j}" for side in ("left", "right") for j in ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper")]


# ------------------------------------------------------------------------------------ configuration
def outputs(**lists: list[Any]) -> dict[str, list[Any]]:
    base = {"output_names": ["arm", "gripper"], "output_types": ["joint_trajectory", "float64_array"],
            "output_topics": ["/arm/joint_trajectory", "/gripper/commands"], "output_dims": ["0..5", "6"],
            "output_joints": [",".join(f"j{i}" for i in range(6)), "g"]}  # fmt: skip
    return {**base, **lists}


def problems_of(action_dim: int, **lists: list[Any]) -> list[str]:
    values = {**S.default_values(), "camera_topics": ["/cam"], **outputs(**lists)}
    bad = S.validate_values(values)
    if bad:
        return bad
    settings, _ = S.settings_from_values(values)
    return S.model_fit_problems(settings, 3, action_dim, None)


@pytest.mark.parametrize(("action_dim", "lists", "line"), [
    (7, {"output_dims": ["0..5", "5..6"]}, "outputs arm and gripper both take action dim 5"),
    (8, {}, "action dims [7] go to no output (the actions have 8 dims)"),
    (6, {}, "output gripper: dims [6] do not exist (the actions have 6 dims)"),
    (7, {"output_types": ["joint_trajectory", "servo"]}, "output gripper: type 'servo' is not one of"),
    (7, {"output_dims": ["0..5", "six"]}, "output gripper: dims 'six': 'six' is not an index or a range a..b"),
    (7, {"output_joints": ["j0,j1", "g"]}, "output arm: 2 joints for 6 dims"),
    (7, {"output_topics": ["/a"]}, "output_topics has 1 entries for 2 output_types"),
    (7, {"output_binarize": ["", "0.5,open"]}, "binarize '0.5,open' must be 'threshold,below,above'"),
    (7, {"output_types": ["twist", "float64_array"], "output_joints": ["", "g"]},
     "output arm: a twist needs its frame (output_frames)"),
    (7, {"output_types": ["float64_array", "twist"], "output_frames": ["", "tool0"]},
     "output gripper: a twist takes 6 dims (linear xyz, angular xyz), got 1"),
])  # fmt: skip
def test_outputs_that_do_not_add_up_are_refused_with_the_reason(action_dim: int, lists: dict, line: str) -> None:
    found = problems_of(action_dim, **lists)
    assert any(line in p for p in found), found


def test_a_valid_split_and_the_legacy_single_trajectory() -> None:
    assert problems_of(7) == []
    values = {**S.default_values(), "camera_topics": ["/cam"], "joint_names": ["a", "b"], "trajectory_topic": "/t"}
    settings, _ = S.settings_from_values(values)
    (legacy,) = settings.outputs
    assert (legacy.type, legacy.topic, legacy.dims, legacy.joints) == ("joint_trajectory", "/t", (0, 1), ("a", "b"))
    assert S.model_fit_problems(settings, 3, 8, None) == []  # the old parameters never had to cover every dim


def test_output_values_binarize_and_scale() -> None:
    (grip, twist) = build_outputs(["g", "t"], ["float64_array", "twist"], ["/g", "/t"], ["6", "0..5"],
                                  frames=["", "tool0"], scales=[1.0, 0.5], binarize=["0.5,0.0,0.08", ""])  # fmt: skip
    row = np.array([0.2, -0.4, 0.1, 0.0, 0.3, -0.1, 0.51])
    assert grip.values(row).tolist() == [0.08] and grip.values(row * 0).tolist() == [0.0]
    np.testing.assert_allclose(twist.values(row), row[:6] * 0.5)
    assert output_problems([grip, twist], 7) == []
    with pytest.raises(OutputConfigError):
        build_outputs(["g"], ["float64_array"], ["/g"], ["-1"])


def test_chunk_stream_rows_follow_the_step_times() -> None:
    stream = ChunkStream()
    actions = np.arange(10, dtype=float)[:, None]
    stream.set(actions, start_ns=1_000_000_000, first=2, times_s=[0.15, 0.2, 0.25])  # rows 2..4, stamped 1 s
    at = lambda s: stream.due(int((1 + s) * 1e9))  # noqa: E731
    # A row's time ends its step: at that instant the next step starts and its own row is due (sim time ticks
    # exactly on the boundaries).
    assert at(0.12)[0] == 2 and at(0.15)[0] == 3 and at(0.17)[0] == 3 and at(0.2499)[0] == 4 and at(0.25) is None


# ----------------------------------------------------------------------------------- over real DDS
@pytest.fixture(scope="module")
def ros_context():
    rclpy.init()
    yield
    rclpy.shutdown()


def fake_node(name: str, action_dim: int, **params: Any) -> tuple[OxygenNode, FakeRuntime]:
    load = FakeRuntime.loader(action_dim=action_dim, scale=0.05)
    values = {"camera_topics": [f"/{name}/cam"], "default_instruction": "go", "control_rate_hz": 10.0,
              "resume_blend_s": 0.0, **params}  # the commands as the chunks say (no blend after activation)
    node = OxygenNode(name, runtime_loader=load, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    return node, load.made[0]


def drive(name: str, node: OxygenNode, topics: dict[str, Any]) -> tuple[Any, Any, dict[str, Collector], Any]:
    driver, executor = make_test_node(f"{name}_driver")
    executor.add_node(node)
    cam = driver.create_publisher(Image, f"/{name}/cam", qos_profile_sensor_data)
    collectors = {topic: Collector(driver, msg_type, topic, RELIABLE) for topic, msg_type in topics.items()}
    assert wait_for_match(executor, [cam, *(c.subscription for c in collectors.values())])

    def publish() -> None:
        cam.publish(array_to_image(np.zeros((8, 8, 3), np.uint8), "rgb8", stamp=driver.get_clock().now().nanoseconds))

    return driver, executor, collectors, publish


def rows_of(chunk: ActionChunk) -> np.ndarray:
    return np.asarray(chunk.data, dtype=np.float64).reshape(chunk.horizon, chunk.action_dim)


def test_bimanual_split_binarized_gripper_and_velocity_trajectories(ros_context) -> None:
    """ALOHA-shaped: two arm JTCs (the right one with a velocity command interface), two gripper
    forward_command_controllers (the left one binarized), and the ActionChunk with all 14 dims."""
    left, right = ",".join(ARMS[:6]), ",".join(ARMS[7:13])
    node, runtime = fake_node(
        "bimanual", 14, n_action_steps=4,
        output_names=["left_arm", "left_gripper", "right_arm", "right_gripper"],
        output_types=["joint_trajectory", "float64_array", "joint_trajectory", "float64_array"],
        output_topics=["/left_arm_controller/joint_trajectory", "/left_gripper_controller/commands",
                       "/right_arm_controller/joint_trajectory", "/right_gripper_controller/commands"],
        output_dims=["0..5", "6", "7..12", "13"], output_joints=[left, ARMS[6], right, ARMS[13]],
        output_interfaces=["position", "position", "velocity", "position"], output_binarize=["", "0.3,0.0,1.0", "", ""],
    )  # fmt: skip
    topics = {"/bimanual/action_chunk": ActionChunk, "/left_arm_controller/joint_trajectory": JointTrajectory,
              "/right_arm_controller/joint_trajectory": JointTrajectory, "/left_gripper_controller/commands": Float64MultiArray,
              "/right_gripper_controller/commands": Float64MultiArray}  # fmt: skip
    driver, executor, got, publish = drive("bimanual", node, topics)
    assert spin_until(executor, lambda: len(got["/right_arm_controller/joint_trajectory"]) >= 3
                      and len(got["/left_gripper_controller/commands"]) >= 3, timeout=30, every=(0.02, publish))  # fmt: skip
    chunk = rows_of(got["/bimanual/action_chunk"].messages[0])
    np.testing.assert_allclose(chunk, runtime._actions, rtol=1e-6)  # all 14 dims, as the model gave them
    for topic, dims, joints, field in (("/left_arm_controller/joint_trajectory", range(0, 6), ARMS[:6], "positions"),
                                       ("/right_arm_controller/joint_trajectory", range(7, 13), ARMS[7:13], "velocities")):  # fmt: skip
        for msg in got[topic].messages:
            assert list(msg.joint_names) == joints
            n = len(msg.points)
            values = np.array([getattr(p, field) for p in msg.points])
            np.testing.assert_allclose(values, chunk[:n, list(dims)], rtol=1e-9)
            other = "positions" if field == "velocities" else "velocities"
            assert all(len(getattr(p, other)) == 0 for p in msg.points)
    # Grippers: one value each, a row of the chunk; the left one binarized at 0.3 to 0/1.
    left_values = [m.data.tolist() for m in got["/left_gripper_controller/commands"].messages]
    right_values = [m.data.tolist() for m in got["/right_gripper_controller/commands"].messages]
    assert all(len(v) == 1 for v in left_values + right_values)
    assert {v[0] for v in left_values} <= {0.0, 1.0}
    assert all(any(abs(v[0] - r) < 1e-9 for r in chunk[:, 13]) for v in right_values)
    expected_left = {float(x > 0.3) for x in chunk[:, 6]}
    assert {v[0] for v in left_values} <= expected_left
    executor.shutdown()
    node.destroy_node()
    driver.destroy_node()


def test_twist_follows_moveit_servos_stale_command_rule(ros_context) -> None:
    """LIBERO-shaped: a TwistStamped for MoveIt Servo from dims 0..5 (scaled, in the tool frame), the gripper
    from dim 6. Servo drops commands older than 0.1 s: while a chunk lasts, a fresh twist arrives at least
    every 0.1 s (chunks here are 1 s apart and 1.2 s long); when the chunks stop, one zero twist stops the arm."""
    node, runtime = fake_node(
        "servo", 7, control_rate_hz=1.0, action_step_period_s=0.1, horizon=12,
        output_names=["eef", "gripper"], output_types=["twist", "float64_array"],
        output_topics=["/servo_node/delta_twist_cmds", "/gripper/commands"], output_dims=["0..5", "6"],
        output_joints=["", "finger"], output_frames=["tool0", ""], output_scales=[0.5, 1.0],
        output_binarize=["", "0.0,-1.0,1.0"],
    )  # fmt: skip
    topics = {"/servo_node/delta_twist_cmds": TwistStamped, "/gripper/commands": Float64MultiArray}
    driver, executor, got, publish = drive("servo", node, topics)
    twists = got["/servo_node/delta_twist_cmds"]
    assert spin_until(executor, lambda: len(twists) >= 30, timeout=30, every=(0.05, publish))
    received = list(twists.messages)
    # Every twist: frame, scale, 6 components of a chunk row; stamped when sent (never stale on arrival).
    for msg in received:
        assert msg.header.frame_id == "tool0"
        v = [msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z, msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z]
        assert any(np.allclose(v, 0.5 * row[:6]) for row in runtime._actions), v
    stamps = [stamp_to_ns(m.header.stamp) / 1e9 for m in received]
    assert max(np.diff(stamps)) < SERVO_TIMEOUT_S  # no gap in which Servo would halt
    # Stop the inputs: the last chunk runs out, one zero twist follows, then silence.
    twists.clear()
    spin_for(executor, 1.8)
    after = twists.messages
    assert after and all(stamp_to_ns(m.header.stamp) > 0 for m in after)
    last = after[-1]
    assert [last.twist.linear.x, last.twist.linear.y, last.twist.linear.z, last.twist.angular.x] == [0.0] * 4
    n = len(after)
    spin_for(executor, 0.5)
    assert len(twists.messages) == n  # nothing after the stop
    assert {m.data.tolist()[0] for m in got["/gripper/commands"].messages} <= {-1.0, 1.0}
    executor.shutdown()
    node.destroy_node()
    driver.destroy_node()


# ------------------------------------------------------------------------------------ shipped configs
@pytest.mark.parametrize(("robot", "action_dim", "controllers"), [
    ("droid", 8, 2), ("aloha", 14, 4), ("so101", 6, 2), ("libero", 7, 2),
])  # fmt: skip
def test_shipped_robot_configs_add_up(tmp_path, robot: str, action_dim: int, controllers: int) -> None:
    """Each config/robots file names its controllers, and its outputs cover its embodiment's action dims."""
    import yaml

    from oxygen_ros.embodiment import make_adapter

    path = ROBOTS / f"{robot}.yaml"
    values = yaml.safe_load(path.read_text())["/**"]["ros__parameters"]
    assert S.validate_values(values) and all("FILL_IN placeholder" in p for p in S.validate_values(values))
    for key in ("checkpoint", "tokenizer"):  # FILL_IN paths: any existing path passes validation
        if values.get(key):
            values[key] = str(tmp_path)
    for key in ("joint_conversions", "output_conversions"):  # FILL_IN calibrations: a plausible SO-101 one
        values[key] = [t.replace("FILL_IN, FILL_IN", "1000, 3000") for t in values.get(key, [])]
    assert values["output_conversions"] and (not values.get("joint_names") or values["joint_conversions"])
    values.pop("camera_features", None)  # names of the checkpoint's cameras: read from the checkpoint
    assert S.validate_values(values) == []
    settings, config = S.settings_from_values(values)
    assert len(settings.outputs) == controllers and settings.explicit_outputs
    adapter = make_adapter(config.embodiment, config.embodiment_options())
    assert (adapter.action_dim or action_dim) == action_dim
    assert S.model_fit_problems(settings, 3, action_dim, adapter.state_dim) == []


def test_aloha_checkpoint_reaches_four_controllers_with_openpis_formulas(ros_context, tmp_path) -> None:
    """The real runtime on an openpi ALOHA folder (embodiment aloha): over DDS each of the four controllers gets
    its dims of openpi's output (Unnormalize, then AlohaOutputs: flip mask and gripper conversion; the grippers
    then in the gripper joint's radians, as real_env.step sends them)."""
    from robot_references import puppet_gripper_joint_unnormalize
    from test_embodiment import ALOHA_STATE, ref_aloha_actions

    from layouts import REF_TINY, openpi_converted, openpi_norm_stats, random_model, stats_arrays
    from oxygen_ros.model.tokenizers.tokenizer import train_tokenizer
    from oxygen_ros.runtime import PolicyRuntime
    from sensor_msgs.msg import JointState

    from oxygen_ros.interface.convert import ns_to_stamp

    tok = tmp_path / "tok" / "tokenizer.model"
    train_tokenizer(tok, 400)
    action = stats_arrays(14, -1.0, 1.5, seed=4)
    folder = openpi_converted(tmp_path / "pi05_aloha", random_model(REF_TINY.replace(action_dim=16)),
                              openpi_norm_stats(stats_arrays(14, -1.5, 2.5, seed=3), action), "trossen")  # fmt: skip
    raw: dict[int, np.ndarray] = {}  # observation stamp -> the model's normalized chunk

    def load(config):  # noqa: ANN001, ANN202
        runtime = PolicyRuntime.load(config)
        step = runtime.step

        def recording(frame, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            result = step(frame, *args, **kwargs)
            raw[frame.stamp_ns] = result.tick.actions.astype(np.float64)
            return result

        runtime.step = recording
        return runtime

    left, right = ",".join(ARMS[:6]), ",".join(ARMS[7:13])
    values = {"checkpoint": str(folder), "tokenizer": str(tok), "engine_mode": "action_only", "kv_budget_mb": 16.0,
              "num_threads": 1, "prompt_format": "pi05_state", "embodiment": "aloha", "camera_topics": ["/aloha/cam"],
              "joint_names": ARMS, "joint_state_topic": "/aloha/joint_states", "default_instruction": "fold the towel",
              "control_rate_hz": 5.0, "max_observation_age_s": 2.0, "resume_blend_s": 0.0,
              "output_names": ["left_arm", "left_gripper", "right_arm", "right_gripper"],
              "output_types": ["joint_trajectory", "float64_array", "joint_trajectory", "float64_array"],
              "output_topics": ["/aloha/left_arm_controller/joint_trajectory", "/aloha/left_gripper_controller/commands",
                                "/aloha/right_arm_controller/joint_trajectory", "/aloha/right_gripper_controller/commands"],
              "output_dims": ["0..5", "6", "7..12", "13"], "output_joints": [left, ARMS[6], right, ARMS[13]],
              "output_conversions": ["6x identity", "aloha_gripper_joint", "6x identity", "aloha_gripper_joint"]}  # fmt: skip
    node = OxygenNode("aloha", runtime_loader=load, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    topics = {"/aloha/left_arm_controller/joint_trajectory": JointTrajectory,
              "/aloha/right_arm_controller/joint_trajectory": JointTrajectory,
              "/aloha/left_gripper_controller/commands": Float64MultiArray,
              "/aloha/right_gripper_controller/commands": Float64MultiArray}  # fmt: skip
    driver, executor, got, publish_image = drive("aloha", node, topics)
    joints = driver.create_publisher(JointState, "/aloha/joint_states", qos_profile_sensor_data)

    def publish() -> None:
        publish_image()
        msg = JointState(name=ARMS, position=ALOHA_STATE.tolist())
        msg.header.stamp = ns_to_stamp(driver.get_clock().now().nanoseconds)
        joints.publish(msg)

    assert spin_until(executor, lambda: all(len(c) >= 2 for c in got.values()), timeout=60, every=(0.05, publish))
    aq01, aq99 = action["q01"], action["q99"]
    expected = {stamp: ref_aloha_actions((a[:, :14] + 1.0) / 2.0 * (aq99 - aq01 + 1e-6) + aq01) for stamp, a in raw.items()}
    for topic, dims in (("/aloha/left_arm_controller/joint_trajectory", slice(0, 6)),
                        ("/aloha/right_arm_controller/joint_trajectory", slice(7, 13))):  # fmt: skip
        for msg in got[topic].messages:
            rows = expected[stamp_to_ns(msg.header.stamp)]
            np.testing.assert_allclose([p.positions for p in msg.points], rows[: len(msg.points), dims], rtol=0, atol=2e-5)
    grippers = {6: got["/aloha/left_gripper_controller/commands"].messages,
                13: got["/aloha/right_gripper_controller/commands"].messages}
    for dim, messages in grippers.items():  # real_env.set_gripper_pose: the normalized gripper to the joint's radians
        candidates = puppet_gripper_joint_unnormalize(np.concatenate([rows[:, dim] for rows in expected.values()]))
        assert all(np.abs(candidates - m.data[0]).min() < 2e-5 for m in messages)
    executor.shutdown()
    node.destroy_node()
    driver.destroy_node()
