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


def test_aloha_config_commands_what_real_env_commands(ros_context, tmp_path: Path) -> None:
    """real_env.get_qpos → AlohaInputs is the state, read from each puppet's own joint-state topic (unprefixed names,
    as Interbotix publishes them); AlohaOutputs → real_env.step is the command (arms through the JTCs, grippers
    through set_gripper_pose's joint unnormalize, unclipped as openpi: 0 → -0.6213, 1 → 1.4910, -0.1 → -0.8325,
    1.1 → 1.7022 rad). The reset pose openpi's pi05_aloha sends is offered on ~/reset_pose for both arms."""
    from test_embodiment import ref_aloha_actions, ref_aloha_state

    horizon = 50
    model = random_model(REF_TINY.replace(action_dim=16, action_horizon=horizon))
    folder = openpi_converted(tmp_path / "pi05_aloha", model,
                              openpi_norm_stats(stats_arrays(14, -1.5, 2.5, seed=3), stats_arrays(14, -1.2, 1.2, seed=4)),
                              "trossen")  # fmt: skip
    # The hardware: per puppet, 6 arm joints, the gripper joint (rad) and the two fingers (m); left open, right closed.
    left_raw = np.array([0.1, -0.8, 0.9, 0.05, 0.3, -0.2, 1.4, 0.058, -0.058])
    right_raw = np.array([-0.1, -0.7, 1.1, 0.0, 0.2, 0.1, -0.6, 0.01844, -0.01844])
    names = ["waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper", "left_finger", "right_finger"]
    puppets = {ref.ALOHA_JOINT_STATE_TOPICS[0]: JointState(name=names, position=left_raw.tolist()),
               ref.ALOHA_JOINT_STATE_TOPICS[1]: JointState(name=names, position=right_raw.tolist())}  # fmt: skip
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
    seen = Seen()
    values = shipped("aloha", folder, tokenizer(tmp_path))
    topics = {"/left_arm_controller/joint_trajectory": JointTrajectory, "/right_arm_controller/joint_trajectory": JointTrajectory,
              "/left_gripper_controller/commands": Float64MultiArray, "/right_gripper_controller/commands": Float64MultiArray}  # fmt: skip
    reset_topic = "/aloha_contract/reset_pose"
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    ends = set(ALOHA_ENDS.values())

    def gripper_ends(got: dict[str, Collector], side: str) -> set[float]:
        return {round(m.data[0], 4) for m in got[f"/{side}_gripper_controller/commands"].messages}

    got = run_node("aloha_contract", values, injecting_loader(chunks, seen), topics, values["camera_topics"], puppets,
                   lambda g: all(ends <= gripper_ends(g, side) for side in ("left", "right")) and len(g[reset_topic]) >= 1
                   and all(len(chunk_trajectories(g[f"/{side}_arm_controller/joint_trajectory"])) >= 3 for side in ("left", "right")),
                   extra={reset_topic: (JointState, latched)})  # fmt: skip

    # The state the model sees: real_env.get_qpos then AlohaInputs (an open gripper, 0.058 m → 1.0 → 0.946).
    assert seen.states and all(np.allclose(s, expected_state, rtol=0, atol=1e-12) for s in seen.states)
    assert seen.states[0][6] == pytest.approx(0.9457, abs=1e-4)
    # The commands: openpi adds the state back (delta joints), AlohaOutputs, then real_env.step.
    mask = np.array([1, 1, 1, 1, 1, 1, 0] * 2, dtype=np.float64)
    commands = {stamp: [ref.aloha_step_rows(ref_aloha_actions(u[:, :14] + mask * expected_state)) for u in chunks]
                for stamp, chunks in seen.actions.items()}  # fmt: skip
    for side in ("left", "right"):
        for msg in chunk_trajectories(got[f"/{side}_arm_controller/joint_trajectory"]):
            sent = np.array([p.positions for p in msg.points])
            assert any(np.allclose(sent, c[f"{side}_arm"][: len(sent)], rtol=0, atol=ATOL) for c in commands[stamp_to_ns(msg.header.stamp)])
        candidates = np.concatenate([c[f"{side}_gripper"] for cs in commands.values() for c in cs])
        sent = [m.data.tolist() for m in got[f"/{side}_gripper_controller/commands"].messages]
        assert all(len(v) == 1 and rows_near(np.array(v), candidates) for v in sent)
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


# ----------------------------------------------------------------------------------------- LIBERO
def test_libero_twist_is_robosuites_measured_osc_motion() -> None:
    """The twist per unit of delta is robosuite's OSC motion per step measured in MuJoCo (the fixture) times the
    control rate: a unit delta sent for one 1/20 s step moves the grip site as far as robosuite's OSC does
    (0.0117 m, 0.072 rad), within the figures' rounding in the config."""
    values = shipped("libero", ROBOTS, ROBOTS)
    settings, _ = S.settings_from_values(values)
    twist = next(o for o in settings.outputs if o.type == "twist")
    measured = ref.osc_measured()["summary"]
    per_step = np.abs(twist.values(np.eye(6))).max(axis=0) / settings.control_rate_hz
    expected = [measured["translation"]["unit_steady_per_step_mean"]] * 3 + [measured["rotation"]["unit_steady_per_step_mean"]] * 3
    assert np.allclose(per_step, expected, rtol=0.01)
    assert np.allclose(twist.values(1.7 * np.eye(6)), twist.values(np.eye(6)))  # robosuite's clip to [-1, 1]
    gripper = next(o for o in settings.outputs if o.name == "gripper")
    for action in (1.0, 0.3, -0.3, -1.0):  # PandaGripper: + closes, - opens
        assert gripper.values(np.array([0.0] * 6 + [action]))[0] == ref.robosuite_finger(action)


def test_libero_config_moves_as_robosuites_osc(ros_context, tmp_path: Path) -> None:
    """robosuite's OSC_POSE: each dim clipped to [-1, 1], a goal 0.05 m / 0.5 rad ahead that the OSC covers at the
    measured 0.234 m/s and 1.43 rad/s per unit, in the base frame; through MoveIt Servo (speed_units, base frame)
    the twist is that speed: 1.7 reaches Servo as 1.0 x the speed. The gripper: +1 closes (0.0 m), -1 opens (0.04 m)."""
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
    speed = np.array([0.234] * 3 + [1.43] * 3)  # the config's twist per unit (checked against the measurement above)
    edge_twist = np.clip(edge, -1, 1) * speed

    def twist_of(m: TwistStamped) -> np.ndarray:
        return np.array([m.twist.linear.x, m.twist.linear.y, m.twist.linear.z, m.twist.angular.x, m.twist.angular.y, m.twist.angular.z])

    def done(g: dict[str, Collector]) -> bool:
        twists = [twist_of(m) for m in g["/servo_node/delta_twist_cmds"].messages]
        fingers = {float(m.data[0]) for m in g["/gripper_controller/commands"].messages}
        return (any(np.allclose(t, edge_twist, atol=ATOL) for t in twists) and len(twists) >= 20
                and fingers >= {ref.PANDA_FINGER_OPEN, ref.PANDA_FINGER_CLOSED} and len(seen.actions) >= 3)

    got = run_node("libero_contract", values, injecting_loader(chunks, seen), topics, values["camera_topics"], {}, done)

    assert not seen.states  # pi05_libero reads no state
    osc = np.array([ref.osc_scale_action(row[:6]) for row in seen.rows()])  # robosuite's goal step per row
    moving = []
    for m in got["/servo_node/delta_twist_cmds"].messages:
        assert m.header.frame_id == "panda_link0"
        v = twist_of(m)
        if np.any(v != 0):
            moving.append(v)
    # The twist is the goal step robosuite sets, at the speed its OSC covers it: goal step / nominal x speed.
    assert moving and all(rows_near(v, osc / ref.OSC_OUTPUT_MAX * speed) for v in moving)
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
