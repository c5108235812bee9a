"""Each shipped config/robots file against its robot's own stack, over DDS.

The real node runs the shipped config (FILL_IN values set to a tiny checkpoint and a plausible calibration) on
a real runtime whose model output is replaced by known chunks: random rows, plus edges (grippers at both ends,
values beyond every clip). A stand-in of the robot's driver, written from its reference (test/robot_references.py),
publishes joint states in the hardware's units and turns what the node publishes into the hardware's command.
Each test asserts that command equals the reference client's for the same model output, and that the state the
model sees equals the reference's for the same hardware state, within float rounding.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import rclpy
import yaml
from geometry_msgs.msg import TwistStamped
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

import robot_references as ref
from layouts import REF_TINY, lerobot_folder, openpi_converted, openpi_norm_stats, random_model, stats_arrays
from oxygen_ros.interface.convert import array_to_image, ns_to_stamp, stamp_to_ns
from oxygen_ros.model.tokenizers.tokenizer import train_tokenizer
from oxygen_ros.ros.node import OxygenNode
from oxygen_ros.runtime import PolicyRuntime
from ros_helpers import Collector, make_test_node, spin_until, wait_for_match

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"
RELIABLE = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
ATOL = 2e-6  # the node publishes float32 actions
EDGE_ROWS = 6  # rows of each chunk at the edges: the first ones, as rows already past on arrival are skipped
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def ros_context():  # noqa: ANN201
    rclpy.init()
    yield
    rclpy.shutdown()


@dataclasses.dataclass
class Seen:
    """What the runtime saw and made of each frame: the model output (unnormalized) and the model-side state."""

    # observation stamp → each chunk made from it ([H, dim]; two ticks may find the same newest observation)
    actions: dict[int, list[np.ndarray]] = dataclasses.field(default_factory=dict)
    states: list[np.ndarray] = dataclasses.field(default_factory=list)

    def rows(self) -> np.ndarray:
        return np.concatenate([u for chunks in self.actions.values() for u in chunks])


def shipped(robot: str, checkpoint: Path, tokenizer: Path, guarded: bool = False, **overrides: Any) -> dict[str, Any]:
    """The shipped config with its FILL_IN paths set, run on this machine's CPU. Unless ``guarded``, without its
    limits and resume blend: the contract is the conversion chain, every command as the reference computes it
    (test_safety_dds.py runs the configs with their limits)."""
    values = yaml.safe_load((ROBOTS / f"{robot}.yaml").read_text())["/**"]["ros__parameters"]
    if not guarded:
        for key in [k for k in values if k.startswith(("limit_", "output_max_"))]:
            del values[key]
        values["resume_blend_s"] = 0.0
    values.update(checkpoint=str(checkpoint), tokenizer=str(tokenizer), device="cpu", dtype="float32",
                  engine_mode="action_only", kv_budget_mb=16.0, num_threads=1, max_observation_age_s=5.0,
                  default_instruction="do the task")  # fmt: skip
    values.update(overrides)
    return values


def injecting_loader(chunks: list[np.ndarray], seen: Seen) -> Callable[[Any], PolicyRuntime]:
    """A runtime whose model output is ``chunks`` in turn (given unnormalized, fed normalized); the rest is real."""

    def load(config: Any) -> PolicyRuntime:
        runtime = PolicyRuntime.load(config)
        norm = runtime.normalizer
        dim = runtime.model_action_dim
        low, high = norm.unnormalize_actions(-np.ones((1, dim))), norm.unnormalize_actions(np.ones((1, dim)))
        cycle = itertools.cycle(chunks)
        inner = runtime._in_robot_units

        def injected(tick: Any, frame: Any, events: list) -> Any:
            wanted = next(cycle)
            x = np.zeros((len(wanted), dim), np.float32)
            x[:, : wanted.shape[1]] = 2 * (wanted - low[0, : wanted.shape[1]]) / (high - low)[0, : wanted.shape[1]] - 1
            seen.actions.setdefault(frame.stamp_ns, []).append(norm.unnormalize_actions(x))
            if frame.robot_state is not None:
                seen.states.append(np.array(frame.robot_state))
            return inner(dataclasses.replace(tick, actions=x), frame, events)

        runtime._in_robot_units = injected
        return runtime

    return load


def run_node(name: str, values: dict[str, Any], loader: Callable, topics: dict[str, Any], cameras: list[str],
             joint_state: Callable[[], JointState] | None, done: Callable[[dict[str, Collector]], bool]) -> dict[str, Collector]:  # fmt: skip
    node = OxygenNode(name, runtime_loader=loader, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    driver, executor = make_test_node(f"{name}_driver")
    executor.add_node(node)
    cams = [driver.create_publisher(Image, topic, qos_profile_sensor_data) for topic in cameras]
    joints = driver.create_publisher(JointState, values["joint_state_topic"], qos_profile_sensor_data) if joint_state else None
    got = {topic: Collector(driver, msg_type, topic, RELIABLE) for topic, msg_type in topics.items()}
    assert wait_for_match(executor, [*cams, *(c.subscription for c in got.values())])

    def publish() -> None:
        now = driver.get_clock().now().nanoseconds
        for cam in cams:
            cam.publish(array_to_image(np.zeros((8, 8, 3), np.uint8), "rgb8", stamp=now))
        if joints is not None:
            msg = joint_state()
            msg.header.stamp = ns_to_stamp(now)
            joints.publish(msg)

    try:
        assert spin_until(executor, lambda: done(got), timeout=90, every=(0.02, publish))
    finally:
        executor.shutdown()
        node.destroy_node()
        driver.destroy_node()
    return got


def rows_near(value: np.ndarray, candidates: np.ndarray, atol: float = ATOL) -> bool:
    return bool(np.any(np.all(np.abs(candidates - value) <= atol, axis=-1)))


def tokenizer(tmp_path: Path) -> Path:
    path = tmp_path / "tok" / "tokenizer.model"
    train_tokenizer(path, 400)
    return path


# ------------------------------------------------------------------------------------------ ALOHA
def test_aloha_config_commands_what_real_env_commands(ros_context, tmp_path: Path) -> None:
    """real_env.get_qpos → AlohaInputs is the state; AlohaOutputs → real_env.step is the command (arms through
    the JTCs, grippers through set_gripper_pose's joint unnormalize): 0 → -0.6213 rad, 1 → 1.4910 rad."""
    from test_embodiment import ref_aloha_actions, ref_aloha_state

    horizon = 50
    model = random_model(REF_TINY.replace(action_dim=16, action_horizon=horizon))
    folder = openpi_converted(tmp_path / "pi05_aloha", model,
                              openpi_norm_stats(stats_arrays(14, -1.5, 2.5, seed=3), stats_arrays(14, -1.2, 1.2, seed=4)),
                              "trossen")  # fmt: skip
    # The hardware: per puppet, 6 arm joints, the gripper joint (rad) and the two fingers (m); left open, right closed.
    left_raw = np.array([0.1, -0.8, 0.9, 0.05, 0.3, -0.2, 1.4, 0.058, -0.058])
    right_raw = np.array([-0.1, -0.7, 1.1, 0.0, 0.2, 0.1, -0.6, 0.01844, -0.01844])
    names = [f"{side}_{j}" for side in ("left", "right") for j in
             ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper", "left_finger", "right_finger")]  # fmt: skip
    hardware = JointState(name=names, position=np.concatenate([left_raw, right_raw]).tolist())
    expected_state = ref_aloha_state(ref.aloha_get_qpos(left_raw, right_raw))  # real_env, then AlohaInputs
    # Model outputs (delta joints, absolute grippers in pi's angular space): a gripper output of -1.1689 is
    # AlohaOutputs' 0 (closed), 0.9434 its 1 (open); the first rows of each chunk put both grippers at one end
    # (the first rows, not row 0 alone: rows already past when the chunk arrives are skipped).
    rng = np.random.default_rng(0)
    chunks = []
    for k in range(4):
        chunk = rng.uniform(-0.5, 0.5, (horizon, 14))
        chunk[:, [6, 13]] = rng.uniform(-1.0, 0.8, (horizon, 2))
        chunk[:EDGE_ROWS, [6, 13]] = [-0.5476 - 0.6213, 1.4910 - 0.5476] if k % 2 == 0 else [1.4910 - 0.5476, -0.5476 - 0.6213]
        chunks.append(chunk)
    seen = Seen()
    values = shipped("aloha", folder, tokenizer(tmp_path), n_action_steps=25)
    topics = {"/left_arm_controller/joint_trajectory": JointTrajectory, "/right_arm_controller/joint_trajectory": JointTrajectory,
              "/left_gripper_controller/commands": Float64MultiArray, "/right_gripper_controller/commands": Float64MultiArray}  # fmt: skip
    got = run_node("aloha_contract", values, injecting_loader(chunks, seen), topics, values["camera_topics"],
                   lambda: hardware, lambda g: all(len(c) >= 3 for c in g.values()) and len(seen.actions) >= 3)  # fmt: skip

    # The state the model sees: real_env.get_qpos then AlohaInputs (an open gripper, 0.058 m → 1.0 → 0.946).
    assert seen.states and all(np.allclose(s, expected_state, rtol=0, atol=1e-12) for s in seen.states)
    assert seen.states[0][6] == pytest.approx(0.9457, abs=1e-4)
    # The commands: openpi adds the state back (delta joints), AlohaOutputs, then real_env.step.
    mask = np.array([1, 1, 1, 1, 1, 1, 0] * 2, dtype=np.float64)
    commands = {stamp: [ref.aloha_step_rows(ref_aloha_actions(u[:, :14] + mask * expected_state)) for u in chunks]
                for stamp, chunks in seen.actions.items()}  # fmt: skip
    for side in ("left", "right"):
        for msg in got[f"/{side}_arm_controller/joint_trajectory"].messages:
            sent = np.array([p.positions for p in msg.points])
            assert any(np.allclose(sent, c[f"{side}_arm"][: len(sent)], rtol=0, atol=ATOL) for c in commands[stamp_to_ns(msg.header.stamp)])
        candidates = np.concatenate([c[f"{side}_gripper"] for cs in commands.values() for c in cs])
        sent = [m.data.tolist() for m in got[f"/{side}_gripper_controller/commands"].messages]
        assert all(len(v) == 1 and rows_near(np.array(v), candidates) for v in sent)
        ends = {round(v[0], 4) for v in sent}
        assert {-0.6213, 1.4910} <= ends, ends  # both ends of the gripper joint were commanded


# ------------------------------------------------------------------------------------------ DROID
def test_droid_config_moves_as_droids_robot_env(ros_context, tmp_path: Path) -> None:
    """openpi's client then RobotEnv(joint_velocity, gripper position): each 1/15 s step the joints move by
    joint_velocity_to_delta (0.2 rad per unit), the gripper goes to max_width · (1 - position). Over a velocity
    interface that is 3 rad/s per unit: v = 0.5 → 1.5 rad/s; 1.7 is clipped to 1 → 3 rad/s."""
    model = random_model(REF_TINY.replace(action_dim=8))
    folder = openpi_converted(tmp_path / "pi05_droid", model,
                              openpi_norm_stats(stats_arrays(8, -2.0, 2.0, seed=5), stats_arrays(8, -2.0, 2.0, seed=6)),
                              "droid")  # fmt: skip
    q = np.array([0.1, -0.4, 0.2, -2.1, 0.05, 1.8, 0.7])
    width = 0.03  # the gripper's opening (m), as polymetis reports it
    names = [f"fr3_joint{i}" for i in range(1, 8)] + ["gripper"]
    hardware = JointState(name=names, position=[*q.tolist(), width])
    rng = np.random.default_rng(1)
    chunks = []
    for k in range(3):
        chunk = rng.uniform(-1.4, 1.4, (10, 8))
        chunk[:EDGE_ROWS, :7] = [0.5, -0.5, 1.7, -1.7, 1.0, -1.0, 0.0]  # v = ±0.5, beyond the clip both ways, the edges
        chunk[:EDGE_ROWS, 7] = 0.9 if k % 2 == 0 else 0.1  # the gripper closed / open (binarized at 0.5)
        chunks.append(chunk)
    seen = Seen()
    values = shipped("droid", folder, tokenizer(tmp_path))
    topics = {"/forward_velocity_controller/commands": Float64MultiArray, "/gripper_controller/commands": Float64MultiArray}
    got = run_node("droid_contract", values, injecting_loader(chunks, seen), topics, values["camera_topics"],
                   lambda: hardware, lambda g: all(len(c) >= 12 for c in g.values()) and len(seen.actions) >= 3)  # fmt: skip

    assert seen.states and all(np.allclose(s, [*q, ref.droid_gripper_position(width)], rtol=0, atol=1e-12) for s in seen.states)
    steps = [ref.droid_step(ref.droid_client(row), q) for row in seen.rows()]
    deltas = np.array([target - q for target, _ in steps])
    widths = np.array([[w] for _, w in steps])
    velocity = [np.array(m.data) for m in got["/forward_velocity_controller/commands"].messages]
    moving = [v for v in velocity if np.any(v != 0)]  # zeros: the chunk ended
    # The velocity interface held for one DROID step moves each joint by RobotEnv's delta.
    assert moving and all(rows_near(v / ref.DROID_CONTROL_HZ, deltas) for v in moving)
    assert any(np.allclose(v, [1.5, -1.5, 3.0, -3.0, 3.0, -3.0, 0.0], atol=ATOL) for v in moving)
    sent = [np.array(m.data) for m in got["/gripper_controller/commands"].messages]
    assert all(rows_near(w, widths) for w in sent)
    assert {round(float(w[0]), 6) for w in sent} == {0.0, 0.085}  # closed and open, as update_gripper goes


# ----------------------------------------------------------------------------------------- LIBERO
def test_libero_config_moves_as_robosuites_osc(ros_context, tmp_path: Path) -> None:
    """robosuite's OSC_POSE: each dim clipped to [-1, 1], scaled to 0.05 m / 0.5 rad per 1/20 s step, applied in
    the base frame. Through MoveIt Servo (unitless, scale.linear 1.0 m/s, scale.rotational 10.0 rad/s, base
    frame) the step is the same; 1.7 reaches Servo as 1.0 (Servo would drop a command beyond 1)."""
    model = random_model(REF_TINY.replace(action_dim=7))
    folder = openpi_converted(tmp_path / "pi05_libero", model,
                              openpi_norm_stats(stats_arrays(8, -1.0, 1.0, seed=7), stats_arrays(7, -2.0, 2.0, seed=8)),
                              "libero")  # fmt: skip
    rng = np.random.default_rng(2)
    chunks = []
    for k in range(3):
        chunk = rng.uniform(-1.5, 1.5, (10, 7))
        chunk[:EDGE_ROWS] = [1.7, -1.7, 0.5, 1.0, -1.0, 0.0, 1.0 if k % 2 == 0 else -1.0]
        chunks.append(chunk)
    seen = Seen()
    values = shipped("libero", folder, tokenizer(tmp_path))
    topics = {"/servo_node/delta_twist_cmds": TwistStamped, "/gripper_controller/commands": Float64MultiArray}
    got = run_node("libero_contract", values, injecting_loader(chunks, seen), topics, values["camera_topics"], None,
                   lambda g: len(g["/servo_node/delta_twist_cmds"]) >= 20 and len(g["/gripper_controller/commands"]) >= 12
                   and len(seen.actions) >= 3)  # fmt: skip

    assert not seen.states  # pi05_libero reads no state
    servo_scale, rate = np.array([1.0] * 3 + [10.0] * 3), 20.0  # the Servo settings libero.yaml asks for
    osc = np.array([ref.osc_scale_action(row[:6]) for row in seen.rows()])
    twists = [m for m in got["/servo_node/delta_twist_cmds"].messages]
    moving = []
    for m in twists:
        assert m.header.frame_id == "panda_link0"
        v = np.array([m.twist.linear.x, m.twist.linear.y, m.twist.linear.z, m.twist.angular.x, m.twist.angular.y, m.twist.angular.z])
        assert np.all(np.abs(v) <= 1.0)  # Servo (unitless) keeps the command
        if np.any(v != 0):
            moving.append(v)
    assert moving and all(rows_near(v * servo_scale / rate, osc) for v in moving)
    assert any(np.allclose(v, [1.0, -1.0, 0.5, 1.0, -1.0, 0.0], atol=ATOL) for v in moving)  # 1.7 → 1.0
    fingers = {float(m.data[0]) for m in got["/gripper_controller/commands"].messages}
    assert fingers == {0.0, 0.04}  # +1 close → 0.0 m, -1 open → 0.04 m


# ---------------------------------------------------------------------------------------- SO-101
CALIBRATION = [("degrees", 758, 3290), ("degrees", 812, 3307), ("degrees", 885, 3112), ("degrees", 851, 3196),
               ("degrees", 140, 3970), ("range_0_100", 2020, 3405)]  # fmt: skip


def test_so101_config_commands_lerobots_ticks(ros_context, tmp_path: Path) -> None:
    """LeRobot's motors bus: the state is _normalize(present tick), the command _unnormalize(action) ticks (range
    modes clamped). Through the driver's radians, the node's command is LeRobot's tick: a gripper action of 120
    goes to range_max, not beyond."""
    fill = iter(f"{lo}, {hi}" for _, lo, hi in CALIBRATION)
    joint_conversions = [t.replace("FILL_IN, FILL_IN", next(fill)) for t in shipped("so101", tmp_path, tmp_path)["joint_conversions"]]
    fill = iter(f"{lo}, {hi}" for _, lo, hi in CALIBRATION)
    output_texts = shipped("so101", tmp_path, tmp_path)["output_conversions"]
    output_conversions = [";".join(part.replace("FILL_IN, FILL_IN", next(fill)) for part in text.split(";")) for text in output_texts]
    model = random_model(REF_TINY.replace(action_dim=6))
    folder = lerobot_folder(tmp_path / "pi05_so101", model, stats_arrays(6, -100.0, 100.0, seed=9),
                            stats_arrays(6, -150.0, 150.0, seed=10),
                            cameras=("observation.images.front", "observation.images.wrist"))  # fmt: skip
    names = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
    ticks = [2048, 812, 3000, 2047, 3970, 3500]  # the last beyond the gripper's range_max (LeRobot clamps it)
    hardware = JointState(name=names, position=[ref.feetech_driver_radians(t, 2048) for t in ticks])
    expected_state = [ref.lerobot_normalize(t, mode, lo, hi) for t, (mode, lo, hi) in zip(ticks, CALIBRATION)]
    rng = np.random.default_rng(3)
    chunks = []
    for k in range(3):
        chunk = rng.uniform(-150, 150, (10, 6))
        chunk[:, 5] = rng.uniform(-20, 120, 10)
        chunk[:EDGE_ROWS] = [0.0, 90.0, -90.0, 45.5, -179.0, 120.0 if k % 2 == 0 else -20.0]
        chunks.append(chunk)
    seen = Seen()
    values = shipped("so101", folder, tokenizer(tmp_path), joint_conversions=joint_conversions,
                     output_conversions=output_conversions, camera_features=["front", "wrist"])  # fmt: skip
    topics = {"/arm_controller/joint_trajectory": JointTrajectory, "/gripper_controller/commands": Float64MultiArray}
    got = run_node("so101_contract", values, injecting_loader(chunks, seen), topics, values["camera_topics"],
                   lambda: hardware, lambda g: len(g["/arm_controller/joint_trajectory"]) >= 3
                   and len(g["/gripper_controller/commands"]) >= 10 and len(seen.actions) >= 3)  # fmt: skip

    assert seen.states and all(np.allclose(s, expected_state, rtol=0, atol=1e-9) for s in seen.states)
    assert seen.states[0][5] == 100.0  # tick 3500 clamped to range_max 3405, as LeRobot reads it

    def lerobot_ticks(row: np.ndarray) -> list[int]:  # LeRobot gets the policy's float32 action
        return [ref.lerobot_unnormalize(float(np.float32(v)), mode, lo, hi) for v, (mode, lo, hi) in zip(row, CALIBRATION)]

    expected = {stamp: [np.array([lerobot_ticks(row) for row in u]) for u in chunks] for stamp, chunks in seen.actions.items()}
    for msg in got["/arm_controller/joint_trajectory"].messages:
        driver_ticks = [[ref.feetech_driver_tick(p, 2048) for p in point.positions] for point in msg.points]
        assert any(driver_ticks == rows[: len(msg.points), :5].tolist() for rows in expected[stamp_to_ns(msg.header.stamp)])
    gripper = {ref.feetech_driver_tick(m.data[0], 2048) for m in got["/gripper_controller/commands"].messages}
    assert gripper <= {int(r[5]) for chunks in expected.values() for rows in chunks for r in rows}
    assert 3405 in gripper  # the action of 120 → range_max, LeRobot's clamp
    assert ref.lerobot_unnormalize(120.0, "range_0_100", 2020, 3405) == 3405
