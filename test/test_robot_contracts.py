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
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

import robot_references as ref
from layouts import REF_TINY, lerobot_folder, openpi_converted, openpi_norm_stats, random_model, stats_arrays
from oxygen_ros.interface import settings as S
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
             joint_states: dict[str, JointState], done: Callable[[dict[str, Collector]], bool],
             timeout_s: float = 180.0, extra: dict[str, tuple[Any, Any]] | None = None) -> dict[str, Collector]:  # fmt: skip
    """Run the node on the shipped config against a stand-in driver (cameras and ``joint_states``: topic → message)
    until ``done`` holds for what was collected: waits for what is expected, within ``timeout_s``. ``extra``: more
    topics to collect (topic → (type, QoS)).

    Teardown in dependency order: the node stops its model thread (``finish``) while the executor still exists, then
    the executor, then the nodes; nothing of the node runs when rclpy shuts down."""
    node = OxygenNode(name, runtime_loader=loader, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    driver, executor = make_test_node(f"{name}_driver")
    executor.add_node(node)
    try:
        cams = [driver.create_publisher(Image, topic, qos_profile_sensor_data) for topic in cameras]
        joints = {topic: driver.create_publisher(JointState, topic, qos_profile_sensor_data) for topic in joint_states}
        got = {topic: Collector(driver, msg_type, topic, RELIABLE) for topic, msg_type in topics.items()}
        got.update({topic: Collector(driver, msg_type, topic, qos) for topic, (msg_type, qos) in (extra or {}).items()})
        assert wait_for_match(executor, [*cams, *joints.values(), *(c.subscription for c in got.values())], timeout=60)

        def publish() -> None:
            now = driver.get_clock().now().nanoseconds
            for cam in cams:
                cam.publish(array_to_image(np.zeros((8, 8, 3), np.uint8), "rgb8", stamp=now))
            for topic, pub in joints.items():
                msg = joint_states[topic]
                msg.header.stamp = ns_to_stamp(now)
                pub.publish(msg)

        assert spin_until(executor, lambda: done(got), timeout=timeout_s, every=(0.02, publish)), \
            {topic: len(c) for topic, c in got.items()}
    finally:
        node.finish()  # joins the model thread: nothing publishes on a destroyed node
        executor.remove_node(node)
        executor.shutdown()
        node.destroy_node()
        driver.destroy_node()
    return got


def chunk_trajectories(collector: Collector) -> list[JointTrajectory]:
    """The trajectories made from chunks (stamped with their observation), not the holds (stamped 0: "start now").
    A hold is legitimate here: on a busy machine a chunk may come after the last one's deadline (the watchdog
    holds: "the model stalls"); a hold of a position output repeats where its controller was last told to be."""
    return [m for m in collector.messages if stamp_to_ns(m.header.stamp) != 0]


def rows_near(value: np.ndarray, candidates: np.ndarray, atol: float = ATOL) -> bool:
    return bool(np.any(np.all(np.abs(candidates - value) <= atol, axis=-1)))


def tokenizer(tmp_path: Path) -> Path:
    path = tmp_path / "tok" / "tokenizer.model"
    train_tokenizer(path, 400)
    return path


# ------------------------------------------------------------------------------------ rates, horizons
@pytest.mark.parametrize("robot", sorted(ref.CONTROL))
def test_config_runs_at_its_stacks_rate_and_horizon(robot: str) -> None:
    """Each config's control rate and the actions run of each chunk are its stack's: ALOHA 50 Hz and 25 of each
    chunk (openpi aloha_real), DROID 15 Hz and 8, LIBERO 20 Hz and 5, SO-101 30 Hz and LeRobot's queue (the
    checkpoint's n_action_steps, a new chunk when they ran)."""
    values = shipped(robot, ROBOTS, ROBOTS)
    rate, steps = ref.CONTROL[robot]
    assert float(values["control_rate_hz"]) == rate
    assert values.get("action_step_period_s", 0.0) in (0.0, 1.0 / rate)  # one action per control period
    assert int(values.get("n_action_steps", 0)) == (steps or 0)  # 0: the checkpoint's n_action_steps
    assert values.get("replan") == "n_action_steps"  # the next chunk once those actions ran, not every tick


# ------------------------------------------------------------------------------------------ ALOHA
ALOHA_ENDS = {"closed": -0.6213, "open": 1.4910, "below": -0.8325, "beyond": 1.7022}  # gripper joint (rad)


def _pi_gripper(normalized: float) -> float:
    """The pi-space gripper output AlohaOutputs turns into ``normalized`` (0 closed, 1 open; outside: beyond)."""
    return normalized * (1.4910 + 0.6213) - 0.6213 - 0.5476


def _aloha_commands(robot: str, values: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Per output (left_arm, left_gripper, ...) its topic and message type in the config form ``robot``."""
    from oxygen_ros.ros.controller_outputs import msg_type

    return {name: (topic, msg_type(kind)) for name, topic, kind in zip(values["output_names"], values["output_topics"], values["output_types"])}


def _sent_rows(robot: str, msg: Any, name: str) -> np.ndarray:
    """The rows one command message carries: a trajectory's points, else its one row. The Interbotix messages must
    name the arm group / the gripper joint as the driver knows them."""
    if robot == "aloha_ros2_control":
        if "arm" in name:
            return np.array([p.positions for p in msg.points])
        return np.array([msg.data.tolist()])
    if "arm" in name:
        assert msg.name == ref.ALOHA_ARM_GROUP and len(msg.cmd) == 6, (msg.name, list(msg.cmd))
        return np.array([list(msg.cmd)])
    assert msg.name == ref.ALOHA_GRIPPER_JOINT, msg.name
    return np.array([[msg.cmd]])


@pytest.mark.parametrize("robot", ["aloha", "aloha_ros2_control"])
def test_aloha_config_commands_what_real_env_commands(ros_context, tmp_path: Path, robot: str) -> None:
    """real_env.get_qpos → AlohaInputs is the state, read from each puppet's own joint-state topic (unprefixed names,
    as Interbotix publishes them); AlohaOutputs → real_env.step is the command (arms as arm.set_joint_positions
    sends them, grippers through set_gripper_pose's joint unnormalize, unclipped as openpi: 0 → -0.6213, 1 → 1.4910,
    -0.1 → -0.8325, 1.1 → 1.7022 rad). aloha.yaml speaks xs_sdk's own messages on Trossen's ROS 2 ALOHA topics
    (JointGroupCommand 'arm' and JointSingleCommand 'gripper' on /follower_<side>/commands/...; the state on
    /follower_<side>/joint_states); aloha_ros2_control.yaml the JTCs and forward command controllers. The reset pose
    openpi's pi05_aloha sends is offered on ~/reset_pose for both arms."""
    from test_embodiment import ref_aloha_actions, ref_aloha_state

    horizon = 50
    model = random_model(REF_TINY.replace(action_dim=16, action_horizon=horizon))
    folder = openpi_converted(tmp_path / "pi05_aloha", model,
                              openpi_norm_stats(stats_arrays(14, -1.5, 2.5, seed=3), stats_arrays(14, -1.2, 1.2, seed=4)),
                              "trossen")  # fmt: skip
    seen = Seen()
    values = shipped(robot, folder, tokenizer(tmp_path))
    if robot == "aloha":  # Trossen's robot names, xs_sdk's group and joint names
        assert list(values["joint_state_topics"]) == list(ref.ALOHA_JOINT_STATE_TOPICS)
        assert list(values["output_topics"]) == [f"/{r}/commands/{kind}" for r in ref.ALOHA_ROBOTS for kind in ("joint_group", "joint_single")]
        assert list(values["output_groups"]) == [ref.ALOHA_ARM_GROUP, ref.ALOHA_GRIPPER_JOINT] * 2
    # The hardware: per puppet, 6 arm joints, the gripper joint (rad) and the two fingers (m); left open, right closed.
    left_raw = np.array([0.1, -0.8, 0.9, 0.05, 0.3, -0.2, 1.4, 0.058, -0.058])
    right_raw = np.array([-0.1, -0.7, 1.1, 0.0, 0.2, 0.1, -0.6, 0.01844, -0.01844])
    names = ["waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper", "left_finger", "right_finger"]
    state_topics = list(values["joint_state_topics"])
    puppets = {state_topics[0]: JointState(name=names, position=left_raw.tolist()),
               state_topics[1]: JointState(name=names, position=right_raw.tolist())}  # fmt: skip
    expected_state = ref_aloha_state(ref.aloha_get_qpos(left_raw, right_raw))  # real_env, then AlohaInputs
    # Model outputs (delta joints, absolute grippers in pi's angular space). Each chunk holds both grippers at one
    # edge for all its rows (any row run shows it): closed / open, then beyond both ends of [0, 1].
    edges = [(0.0, 1.0), (1.0, 0.0), (-0.1, 1.1), (1.1, -0.1)]
    rng = np.random.default_rng(0)
    chunks = []
    for left, right in edges:
        chunk = rng.uniform(-0.5, 0.5, (horizon, 14))
        chunk[:, [6, 13]] = [_pi_gripper(left), _pi_gripper(right)]
        chunks.append(chunk)
    outputs = _aloha_commands(robot, values)
    topics = dict(outputs.values())
    reset_topic = "/aloha_contract/reset_pose"
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    ends = set(ALOHA_ENDS.values())

    def rows(got: dict[str, Collector], name: str) -> list[np.ndarray]:
        return [_sent_rows(robot, m, name) for m in got[outputs[name][0]].messages]

    def arm_commands(got: dict[str, Collector], name: str) -> list[Any]:
        """A trajectory form's chunk trajectories (not its holds); every streamed command."""
        collector = got[outputs[name][0]]
        return chunk_trajectories(collector) if robot == "aloha_ros2_control" else collector.messages

    def gripper_ends(got: dict[str, Collector], side: str) -> set[float]:
        return {round(float(r[0, 0]), 4) for r in rows(got, f"{side}_gripper")}

    got = run_node("aloha_contract", values, injecting_loader(chunks, seen), topics, values["camera_topics"], puppets,
                   lambda g: all(ends <= gripper_ends(g, side) for side in ("left", "right")) and len(g[reset_topic]) >= 1
                   and all(len(arm_commands(g, f"{side}_arm")) >= 3 for side in ("left", "right")),
                   extra={reset_topic: (JointState, latched)})  # fmt: skip

    # The state the model sees: real_env.get_qpos then AlohaInputs (an open gripper, 0.058 m → 1.0 → 0.946).
    assert seen.states and all(np.allclose(s, expected_state, rtol=0, atol=1e-12) for s in seen.states)
    assert seen.states[0][6] == pytest.approx(0.9457, abs=1e-4)
    # The commands: openpi adds the state back (delta joints), AlohaOutputs, then real_env.step.
    mask = np.array([1, 1, 1, 1, 1, 1, 0] * 2, dtype=np.float64)
    commands = {stamp: [ref.aloha_step_rows(ref_aloha_actions(u[:, :14] + mask * expected_state)) for u in chunks]
                for stamp, chunks in seen.actions.items()}  # fmt: skip
    for side in ("left", "right"):
        arm = f"{side}_arm"
        if robot == "aloha_ros2_control":  # a trajectory: the chunk's rows from its observation's stamp on
            for msg in arm_commands(got, arm):
                sent = _sent_rows(robot, msg, arm)
                assert any(np.allclose(sent, c[arm][: len(sent)], rtol=0, atol=ATOL) for c in commands[stamp_to_ns(msg.header.stamp)])
        else:  # streamed: each command one row of a chunk (float32 on the wire); a hold repeats the last one
            candidates = np.concatenate([c[arm] for cs in commands.values() for c in cs])
            assert all(rows_near(r[0], candidates, atol=4 * ATOL) for r in rows(got, arm))
        candidates = np.concatenate([c[f"{side}_gripper"] for cs in commands.values() for c in cs])
        assert all(r.shape == (1, 1) and rows_near(r[0], candidates, atol=4 * ATOL) for r in rows(got, f"{side}_gripper"))
        assert gripper_ends(got, side) == ends  # both ends and beyond them, unclipped as real_env commands them
    offered = got[reset_topic].messages[-1]
    arm_joints = [j for side in ("left", "right") for j in values["output_joints"][0 if side == "left" else 2].split(",")]
    assert list(offered.name) == arm_joints and list(offered.position) == list(ref.ALOHA_RESET_POSE) * 2


# ------------------------------------------------------------------------------------------ DROID
def test_droid_config_moves_as_droids_robot_env(ros_context, tmp_path: Path) -> None:
    """openpi's client then RobotEnv(joint_velocity, gripper position): each 1/15 s step the joints go to the
    measured positions + joint_velocity_to_delta (0.2 rad per unit), the gripper to position (0 open, 1 closed) —
    the knuckle angle 0.7929 x position on the ROS 2 Robotiq driver. v = 0.5 → +0.1 rad; 1.7 is clipped to 1."""
    model = random_model(REF_TINY.replace(action_dim=8))
    folder = openpi_converted(tmp_path / "pi05_droid", model,
                              openpi_norm_stats(stats_arrays(8, -2.0, 2.0, seed=5), stats_arrays(8, -2.0, 2.0, seed=6)),
                              "droid")  # fmt: skip
    q = np.array([0.1, -0.4, 0.2, -2.1, 0.05, 1.8, 0.7])
    width = 0.03  # the gripper's opening (m); the driver reports its knuckle angle
    names = [f"fr3_joint{i}" for i in range(1, 8)] + ["robotiq_85_left_knuckle_joint"]
    hardware = {"/joint_states": JointState(name=names, position=[*q.tolist(), ref.robotiq_knuckle(width)])}
    edge = np.array([0.5, -0.5, 1.7, -1.7, 1.0, -1.0, 0.0])  # v = ±0.5, beyond the clip both ways, the edges
    rng = np.random.default_rng(1)
    chunks = []
    for k in range(4):  # the edge chunks, then random ones; the gripper closed / open for whole chunks
        chunk = np.tile([*edge, 0.0], (10, 1)) if k < 2 else rng.uniform(-1.4, 1.4, (10, 8))
        chunk[:, 7] = 0.9 if k % 2 == 0 else 0.1  # binarized at 0.5
        chunks.append(chunk)
    seen = Seen()
    values = shipped("droid", folder, tokenizer(tmp_path))
    arm_topic = values["output_topics"][0]
    topics = {arm_topic: Float64MultiArray, "/gripper_controller/commands": Float64MultiArray}
    edge_target = q + ref.droid_joint_velocity_to_delta(np.clip(edge, -1, 1))

    def done(g: dict[str, Collector]) -> bool:
        arm = [np.array(m.data) for m in g[arm_topic].messages]
        knuckles = {round(float(m.data[0]), 6) for m in g["/gripper_controller/commands"].messages}
        return (any(np.allclose(a, edge_target, atol=ATOL) for a in arm) and len(arm) >= 12
                and knuckles >= {0.0, ref.ROBOTIQ_KNUCKLE_CLOSED} and len(seen.actions) >= 3)

    got = run_node("droid_contract", values, injecting_loader(chunks, seen), topics, values["camera_topics"], hardware, done)

    # The state: the knuckle angle read as DROID's gripper position (1 - width / max_width).
    assert seen.states and all(np.allclose(s, [*q, ref.droid_gripper_position(width)], rtol=0, atol=1e-12) for s in seen.states)
    steps = [ref.droid_step(ref.droid_client(row), q) for row in seen.rows()]
    targets = np.array([target for target, _ in steps])
    knuckles = np.array([[ref.robotiq_knuckle(w)] for _, w in steps])
    sent = [np.array(m.data) for m in got[arm_topic].messages]
    assert sent and all(rows_near(a, targets) for a in sent)  # RobotEnv's target from the measured positions
    assert any(np.allclose(a - q, [0.1, -0.1, 0.2, -0.2, 0.2, -0.2, 0.0], atol=ATOL) for a in sent)
    grip = [np.array(m.data) for m in got["/gripper_controller/commands"].messages]
    assert all(rows_near(k, knuckles) for k in grip)
    assert {round(float(k[0]), 6) for k in grip} == {0.0, ref.ROBOTIQ_KNUCKLE_CLOSED}  # open and closed


def test_droid_position_step_period_and_velocity_form_within_franka_limits() -> None:
    """DROID's step lasts one control period of the config (1/15 s). The velocity form the config documents moves
    as DROID does (0.2 rad per step, 3 rad/s per unit) up to the Panda's limits and no faster: |v| = 1 → 2.175 rad/s
    on joints 1-4 and 2.61 on joints 5-7 (3.0 would be beyond both)."""
    values = shipped("droid", ROBOTS, ROBOTS)
    settings, _ = S.settings_from_values(values)
    assert settings.step_period_s == pytest.approx(1 / ref.DROID_CONTROL_HZ)
    arm = next(o for o in settings.outputs if o.name == "arm")
    assert arm.interface == "position_step"
    unit = np.eye(7)
    assert np.allclose(arm.values(unit), 0.2 * unit) and np.allclose(arm.values(1.7 * unit), 0.2 * unit)

    line = next(l for l in (ROBOTS / "droid.yaml").read_text().splitlines() if "velocity form:" in l)
    velocity, _ = S.settings_from_values({**values, **yaml.safe_load(line.split("velocity form:", 1)[1])})
    arm = next(o for o in velocity.outputs if o.name == "arm")
    assert arm.interface == "velocity"
    speeds = arm.values(np.vstack([np.eye(7), -np.eye(7)]))
    assert np.allclose(np.abs(speeds).max(axis=0), ref.PANDA_MAX_JOINT_VELOCITY)  # |v| = 1: the limit, not 3.0
    slow = np.random.default_rng(4).uniform(-0.7, 0.7, (50, 7))  # below every limit
    held = arm.values(slow) / velocity.control_rate_hz  # held for one control period of the config
    assert np.allclose(held, [ref.droid_joint_velocity_to_delta(v) for v in slow], atol=1e-12)  # DROID's step


def _form(robot: str, label: str) -> dict[str, Any]:
    """The overrides a config documents on a comment line '<label>: {...}'."""
    line = next(l for l in (ROBOTS / f"{robot}.yaml").read_text().splitlines() if f"{label}:" in l)
    return yaml.safe_load(line.split(f"{label}:", 1)[1])


def test_droid_velocity_form_scales_all_joints_together_as_droid() -> None:
    """Beyond a joint's limit the velocity form scales the whole command down, keeping its direction, as DROID's
    joint_velocity_to_delta scales all joints when the largest is beyond 1 (a clip joint by joint would turn it)."""
    values = shipped("droid", ROBOTS, ROBOTS)
    velocity, _ = S.settings_from_values({**values, **_form("droid", "velocity form")})
    arm = next(o for o in velocity.outputs if o.name == "arm")
    rng = np.random.default_rng(7)
    for v in [np.array([1.0, 0.5, 0.25, 0.0, 0.6, -0.9, 0.1]), *rng.uniform(-1.3, 1.3, (40, 7))]:
        sent = arm.values(v)
        droid = ref.droid_joint_velocity_to_delta(np.clip(v, -1, 1)) * ref.DROID_CONTROL_HZ  # DROID's rad/s
        ratio = np.max(np.abs(droid) / ref.PANDA_MAX_JOINT_VELOCITY)
        assert np.allclose(sent, droid / max(ratio, 1.0), atol=1e-12)  # DROID's direction, at most the limit
        assert np.all(np.abs(sent) <= ref.PANDA_MAX_JOINT_VELOCITY + 1e-12)


def test_droid_gripper_state_clipped_and_moved_at_droids_speed_and_force() -> None:
    """The gripper state is clipped to [0, 1] as DROID clips it (the driver's 0.8 rad, register 255, reads 1.0, not
    1.009); the Robotiq hardware block the config names writes DROID's speed and force registers (146, 0), not
    ros2_robotiq_gripper's defaults (255, 255)."""
    import xml.etree.ElementTree as ET

    from oxygen_ros.embodiment import parse_conversions

    values = shipped("droid", ROBOTS, ROBOTS)
    state = parse_conversions(values["joint_conversions"][7], "joint_conversions[7]")
    assert np.allclose(state.to_model(np.array([[0.8], [0.7929], [0.0], [-0.01]]))[:, 0], [1.0, 1.0, 0.0, 0.0])
    name = "droid_robotiq_gripper.ros2_control.xml"
    assert name in (ROBOTS / "droid.yaml").read_text()
    params = {p.get("name"): float(p.text) for p in ET.parse(ROBOTS / name).getroot().iter("param")}
    registers = (ref.ros2_robotiq_register(params["gripper_speed_multiplier"]), ref.ros2_robotiq_register(params["gripper_force_multiplier"]))
    assert registers == ref.polymetis_robotiq_registers(ref.DROID_GRIPPER_SPEED, ref.DROID_GRIPPER_FORCE) == (146, 0)
    assert params["gripper_closed_position"] == ref.ROBOTIQ_KNUCKLE_CLOSED


def test_droid_fr3_form_has_the_fr3_limits_joint_by_joint() -> None:
    """The FR3 form the config documents carries Franka's FR3 joint velocity limits in joint order (1-4: 2.62,
    5: 5.26, 6: 4.18, 7: 5.26) and keeps the gripper's."""
    values = shipped("droid", ROBOTS, ROBOTS, guarded=True)
    fr3 = _form("droid", "FR3 form")
    settings, _ = S.settings_from_values({**values, **fr3})
    assert np.allclose(fr3["limit_max_velocity"][:7], ref.FR3_MAX_JOINT_VELOCITY)
    assert fr3["limit_max_velocity"][7] == values["limit_max_velocity"][7]
    assert np.allclose(settings.limits["arm"].max_velocity, ref.FR3_MAX_JOINT_VELOCITY)


@pytest.mark.parametrize("robot", sorted(ref.CONTROL))
def test_each_config_chooses_its_resume_blend(robot: str) -> None:
    """Every config sets resume_blend_s itself, saying what the blend changes for its robot. DROID's is 0: the first
    command after a resume is DROID's full step from the measured joints (measured + 0.2 v, a step within the Panda's
    velocity limits), not a blend of it (0.5 s would send 0.133 of it)."""
    from oxygen_ros.runtime.safety import SafetyGuard

    text = (ROBOTS / f"{robot}.yaml").read_text()
    raw = yaml.safe_load(text)["/**"]["ros__parameters"]
    assert "resume_blend_s" in raw and "Resume blend" in text
    if robot != "droid":
        return
    settings, _ = S.settings_from_values(shipped("droid", ROBOTS, ROBOTS, guarded=True))
    guard = SafetyGuard(settings.outputs, settings.limits, settings.step_period_s, settings.resume_blend_s)
    arm = next(o for o in settings.outputs if o.name == "arm")
    q = np.array([0.1, -0.4, 0.2, -2.1, 0.05, 1.8, 0.7])
    v = np.array([0.7, -0.7, 0.5, 0.0, 0.3, -0.6, 0.8])  # 0.2 v: at most 2.1 rad/s (joints 1-4), 2.4 (5-7)
    guard.measured.put(list(arm.joints), q, 0)
    first = guard.stream(arm, q + arm.values(v), 0)
    assert np.allclose(first, q + ref.droid_joint_velocity_to_delta(v), atol=1e-12)


# ----------------------------------------------------------------------------------------- LIBERO
# Combinations whose speed robosuite's own dynamics set apart from its axes' (measured, fixture), with the twist's
# error: a rotation about x also turns the grip site about y (-0.65 rad/s at |1|), which (1, 1, 0) and (0.1, -0.1,
# 0.1) add up, and a move along x also moves it down, which adds to (0.1, 0.1, -0.1) (robosuite's own single-axis
# motions, added as vectors, give these within 4 %, 10 % and 1 %); (-1, -1, -1) runs at 0.30 m/s where its axes run
# 0.24, 0.21, 0.26 each (and their vector sum 0.39). The twist, axis by axis, cannot follow these.
OSC_COUPLED = {(0, 0, 0, 1, 1, 0): 0.18, (0, 0, 0, 0.1, -0.1, 0.1): 0.16, (0.1, 0.1, -0.1, 0, 0, 0): 0.10,
               (-1, -1, -1, 0, 0, 0): 0.36}


def _osc_speed_error(twist: Any, action: np.ndarray, measured: np.ndarray, part: slice) -> float:
    sent = twist.values(action)[part]
    return float(np.linalg.norm(sent) / np.linalg.norm(measured[part]) - 1)


def test_libero_twist_moves_the_grip_site_as_robosuites_osc() -> None:
    """The twist moves the grip site as robosuite's OSC_POSE moves it for the same delta (measured in MuJoCo,
    test/fixtures/robosuite_osc_gain.json): along each axis within 10 % at every magnitude 0.1 … 1 of either sign,
    those the config's curves were made from and those measured between them (0.15, 0.35, 0.6, 0.9); in
    combination (pure translations, pure rotations) at robosuite's speed within 10 % — a diagonal (1, 1, 1) at 0.40
    m/s, not capped at one axis' speed — except where robosuite's coupling of its axes sets the speed apart
    (``OSC_COUPLED``, each still that far off). The gripper: + closes, - opens."""
    values = shipped("libero", ROBOTS, ROBOTS, guarded=True)
    settings, _ = S.settings_from_values(values)
    twist = next(o for o in settings.outputs if o.type == "twist")
    cases = ref.osc_cases()
    single = [(a, m) for a, m in cases if np.count_nonzero(a) == 1]
    assert {round(abs(a).max(), 2) for a, _ in single} == {0.1, 0.15, 0.25, 0.35, 0.5, 0.6, 0.75, 0.9, 1.0}
    for action, measured in single:
        axis = int(np.flatnonzero(action)[0])
        assert twist.values(action)[axis] == pytest.approx(measured[axis], rel=0.10), (action, measured[axis])
    combined = [(a, m) for a, m in cases if np.count_nonzero(a) > 1]
    for action, measured in combined:
        for part in (slice(0, 3), slice(3, 6)):
            if not np.any(action[part]) or np.any(action[slice(3, 6) if part.start == 0 else slice(0, 3)]):
                continue  # pure translations and pure rotations: a rotation also moves the grip site (its drift)
            error = _osc_speed_error(twist, action, measured, part)
            known = OSC_COUPLED.get(tuple(float(x) for x in action))
            assert abs(error) <= 0.10 if known is None else abs(error) == pytest.approx(known, abs=0.02), (action, error)
    # The guard's norm limits hold only what the curves cannot produce: the fastest corner runs unslowed.
    limits = settings.limits["eef"]
    corner = np.abs(twist.values(np.array([-1.0, -1.0, -1.0, -1.0, 1.0, -1.0])))
    assert np.linalg.norm(corner[:3]) <= limits.max_linear_speed and np.linalg.norm(corner[3:]) <= limits.max_angular_speed
    assert np.allclose(twist.values(1.7 * np.eye(6)), twist.values(np.eye(6)))  # robosuite's clip to [-1, 1]
    gripper = next(o for o in settings.outputs if o.name == "gripper")
    for action in (1.0, 0.3, -0.3, -1.0):  # PandaGripper: + closes, - opens
        assert gripper.values(np.array([0.0] * 6 + [action]))[0] == ref.robosuite_finger(action)


def test_libero_config_moves_as_robosuites_osc(ros_context, tmp_path: Path) -> None:
    """robosuite's OSC_POSE: each dim clipped to [-1, 1] (scale_action), then the speed its OSC reaches for that
    delta, in the base frame; through MoveIt Servo (speed_units, base frame) the twist is that speed, axis by axis
    (the curves checked against the measurement above): 1.7 reaches Servo as 1.0's speed. The gripper: +1 closes
    (0.0 m), -1 opens (0.04 m)."""
    model = random_model(REF_TINY.replace(action_dim=7))
    folder = openpi_converted(tmp_path / "pi05_libero", model,
                              openpi_norm_stats(stats_arrays(8, -1.0, 1.0, seed=7), stats_arrays(7, -2.0, 2.0, seed=8)),
                              "libero")  # fmt: skip
    edge = [1.7, -1.7, 0.5, 1.0, -1.0, 0.0]
    rng = np.random.default_rng(2)
    chunks = []
    for k in range(4):  # edge chunks, then random ones; the gripper closed / open for whole chunks
        chunk = np.tile([*edge, 0.0], (10, 1)) if k < 2 else rng.uniform(-1.5, 1.5, (10, 7))
        chunk[:, 6] = 1.0 if k % 2 == 0 else -1.0
        chunks.append(chunk)
    seen = Seen()
    values = shipped("libero", folder, tokenizer(tmp_path))
    topics = {"/servo_node/delta_twist_cmds": TwistStamped, "/gripper_controller/commands": Float64MultiArray}
    settings, _ = S.settings_from_values(values)
    curves = next(o for o in settings.outputs if o.type == "twist")  # checked against robosuite above
    edge_twist = curves.values(np.clip(edge, -1, 1))

    def twist_of(m: TwistStamped) -> np.ndarray:
        return np.array([m.twist.linear.x, m.twist.linear.y, m.twist.linear.z, m.twist.angular.x, m.twist.angular.y, m.twist.angular.z])

    def done(g: dict[str, Collector]) -> bool:
        twists = [twist_of(m) for m in g["/servo_node/delta_twist_cmds"].messages]
        fingers = {float(m.data[0]) for m in g["/gripper_controller/commands"].messages}
        return (any(np.allclose(t, edge_twist, atol=ATOL) for t in twists) and len(twists) >= 20
                and fingers >= {ref.PANDA_FINGER_OPEN, ref.PANDA_FINGER_CLOSED} and len(seen.actions) >= 3)

    got = run_node("libero_contract", values, injecting_loader(chunks, seen), topics, values["camera_topics"], {}, done)

    assert not seen.states  # pi05_libero reads no state
    osc = np.array([ref.osc_scale_action(row[:6]) for row in seen.rows()]) / ref.OSC_OUTPUT_MAX  # scale_action's clip
    moving = []
    for m in got["/servo_node/delta_twist_cmds"].messages:
        assert m.header.frame_id == "panda_link0"
        v = twist_of(m)
        if np.any(v != 0):
            moving.append(v)
    # The twist is the speed robosuite's OSC reaches for the clipped delta it sets its goal from, axis by axis.
    assert moving and all(rows_near(v, curves.values(osc)) for v in moving)
    assert any(np.allclose(v, edge_twist, atol=ATOL) for v in moving)  # 1.7 → 1.0
    fingers = {float(m.data[0]) for m in got["/gripper_controller/commands"].messages}
    assert fingers == {ref.PANDA_FINGER_OPEN, ref.PANDA_FINGER_CLOSED}


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
    hardware = {"/joint_states": JointState(name=names, position=[ref.feetech_driver_radians(t, 2048) for t in ticks])}
    expected_state = [ref.lerobot_normalize(t, mode, lo, hi) for t, (mode, lo, hi) in zip(ticks, CALIBRATION)]
    rng = np.random.default_rng(3)
    chunks = []
    for k in range(3):
        chunk = rng.uniform(-150, 150, (10, 6))
        chunk[:, 5] = rng.uniform(-20, 120, 10)
        chunk[:EDGE_ROWS, :5] = [0.0, 90.0, -90.0, 45.5, -179.0]
        chunk[:, 5] = 120.0 if k % 2 == 0 else -20.0  # the gripper beyond its range both ways, for whole chunks
        chunks.append(chunk)
    seen = Seen()
    values = shipped("so101", folder, tokenizer(tmp_path), joint_conversions=joint_conversions,
                     output_conversions=output_conversions, camera_features=["front", "wrist"])  # fmt: skip
    topics = {"/arm_controller/joint_trajectory": JointTrajectory, "/gripper_controller/commands": Float64MultiArray}
    range_max = ref.feetech_driver_radians(3405, 2048)
    got = run_node("so101_contract", values, injecting_loader(chunks, seen), topics, values["camera_topics"], hardware,
                   lambda g: len(chunk_trajectories(g["/arm_controller/joint_trajectory"])) >= 3 and len(seen.actions) >= 3
                   and any(abs(m.data[0] - range_max) < 1e-9 for m in g["/gripper_controller/commands"].messages))  # fmt: skip

    assert seen.states and all(np.allclose(s, expected_state, rtol=0, atol=1e-9) for s in seen.states)
    assert seen.states[0][5] == 100.0  # tick 3500 clamped to range_max 3405, as LeRobot reads it

    def lerobot_ticks(row: np.ndarray) -> list[int]:  # LeRobot gets the policy's float32 action
        return [ref.lerobot_unnormalize(float(np.float32(v)), mode, lo, hi) for v, (mode, lo, hi) in zip(row, CALIBRATION)]

    expected = {stamp: [np.array([lerobot_ticks(row) for row in u]) for u in chunks] for stamp, chunks in seen.actions.items()}
    for msg in chunk_trajectories(got["/arm_controller/joint_trajectory"]):
        driver_ticks = [[ref.feetech_driver_tick(p, 2048) for p in point.positions] for point in msg.points]
        assert any(driver_ticks == rows[: len(msg.points), :5].tolist() for rows in expected[stamp_to_ns(msg.header.stamp)])
    gripper = {ref.feetech_driver_tick(m.data[0], 2048) for m in got["/gripper_controller/commands"].messages}
    assert gripper <= {int(r[5]) for chunks in expected.values() for rows in chunks for r in rows}
    assert 3405 in gripper  # the action of 120 → range_max, LeRobot's clamp
    assert ref.lerobot_unnormalize(120.0, "range_0_100", 2020, 3405) == 3405
