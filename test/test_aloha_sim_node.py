"""The MuJoCo ALOHA behind ROS, over real DDS on loopback: ``oxygen_sim_node`` (backend aloha) at the real
robot's topics and units in lockstep with its policy; the scripted expert through ``config/robots/aloha.yaml``'s
output path (the Interbotix driver's messages, checked as xs_sdk checks them) and through the ros2_control form
into the arm, and the same with a conversion broken on purpose; the simulated xs_sdk refusing what the driver
refuses; ``oxygen_node`` with an ALOHA-shaped small π0.5 closing the loop without a late chunk in sim time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from aloha_available import require_aloha  # noqa: E402

require_aloha()

import rclpy  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, String  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from oxygen_ros.interface.convert import stamp_to_ns  # noqa: E402
from oxygen_ros.interface.outputs import to_trajectory_msg  # noqa: E402
from oxygen_ros.sim_ros.aloha_loop import node_values, run_loop, through_outputs  # noqa: E402
from oxygen_ros.runtime.trajectory import TimedTrajectory  # noqa: E402
from oxygen_ros.sim.aloha import units  # noqa: E402
from oxygen_ros.sim.aloha.checkpoint import write_small_checkpoint  # noqa: E402

from ros_helpers import Collector, NodeProcess, make_test_node, spin_for, spin_until, wait_for_match  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ALOHA_YAML = REPO / "config" / "robots" / "aloha.yaml"  # the Interbotix driver's interface
ROS2_CONTROL_YAML = REPO / "config" / "robots" / "aloha_ros2_control.yaml"
RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
# The expert transfers the cube at step 220; 240 steps bound the runs that fail.
STEPS = 240


@pytest.fixture
def ros_context():
    rclpy.init()
    yield
    rclpy.shutdown()


def test_sim_node_waits_for_its_policy_and_speaks_the_drivers_units(ros_context) -> None:
    """The simulator process (backend aloha) with the test as its policy: the clock does not move while no
    trajectory answers the observation; the arms follow JointTrajectory commands, a gripper command in rad puts
    the finger where ALOHA's PUPPET_JOINT2POS does, and the joint states report the driver's units."""
    node, executor = make_test_node("aloha_policy_stand_in")
    left_arm = node.create_publisher(JointTrajectory, "/left_arm_controller/joint_trajectory", RELIABLE)
    right_arm = node.create_publisher(JointTrajectory, "/right_arm_controller/joint_trajectory", RELIABLE)
    grippers = [node.create_publisher(Float64MultiArray, f"/{a}_gripper_controller/commands", RELIABLE) for a in ("left", "right")]
    clock = Collector(node, Clock, "/clock", RELIABLE)
    joints = Collector(node, JointState, "/joint_states", qos_profile_sensor_data)
    puppets = [Collector(node, JointState, f"/puppet_{a}/joint_states", qos_profile_sensor_data) for a in ("left", "right")]
    cams = [Collector(node, Image, f"/cam_{c}/image_raw", qos_profile_sensor_data) for c in ("high", "left_wrist", "right_wrist")]
    cam = cams[1]
    episodes = Collector(node, String, "/oxygen_sim_node/episode", QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                                                                            durability=rclpy.qos.DurabilityPolicy.TRANSIENT_LOCAL))
    sim = NodeProcess([REPO / "config" / "aloha_sim.yaml"], module="oxygen_ros.sim_ros.main", ros_args=[
        "-p", "image_width:=64", "-p", "image_height:=48", "-p", "fast_render:=true", "-p", "episodes:=1",
        "-p", "episode_steps:=30", "-p", "query_every_steps:=10"]).start()  # fmt: skip
    try:
        assert wait_for_match(executor, [left_arm, right_arm, *grippers, clock.subscription, joints.subscription,
                                         *(c.subscription for c in cams), *(p.subscription for p in puppets)],
                              timeout=60), sim.output()  # fmt: skip
        assert spin_until(executor, lambda: len(clock) >= 1 and len(cam) >= 1, timeout=60), sim.output()
        t0 = stamp_to_ns(clock.messages[0].clock)
        assert t0 == 200_000_000 and stamp_to_ns(cam.messages[0].header.stamp) == t0  # the first query, on its grid
        image = cam.messages[0]
        assert (image.width, image.height, image.encoding) == (64, 48, "rgb8")
        spin_for(executor, 1.0)  # no answer yet: sim time stands still
        assert len(clock) == 1
        target = np.array([0.25, -0.7, 1.0, 0.0, -0.2, 0.1])
        names = [f"left_{j}" for j in units.ARM_JOINTS]
        for query in range(3):
            now = stamp_to_ns(clock.messages[-1].clock)
            times = np.arange(1, 11) * units.DT
            path = np.array(units.START_ARM) + (target - np.array(units.START_ARM)) * np.minimum(1, (query * 0.2 + times) / 0.4)[:, None]
            left_arm.publish(to_trajectory_msg(TimedTrajectory(names, times, path, start_time_ns=now)))
            right_arm.publish(to_trajectory_msg(TimedTrajectory([f"right_{j}" for j in units.ARM_JOINTS], times,
                                                                np.tile(units.START_ARM, (10, 1)), start_time_ns=now)))  # fmt: skip
            for step in range(10):  # one gripper command a step while the trajectory runs, as a streamed output
                seen = len(clock)
                grippers[0].publish(Float64MultiArray(data=[units.GRIPPER_JOINT_OPEN_RAD]))
                grippers[1].publish(Float64MultiArray(data=[0.3]))
                if query == 2 and step == 9:
                    break
                assert spin_until(executor, lambda: len(clock) > seen, timeout=30), sim.output()
        assert spin_until(executor, lambda: any('"end"' in m.data for m in episodes.messages), timeout=30), sim.output()
        stamps = [stamp_to_ns(m.clock) for m in clock.messages]
        assert np.all(np.diff(stamps) == 20_000_000) and len(stamps) == 30
        assert [len(c) for c in cams] == [3, 3, 3]  # rendered only at the three queries
        assert not np.array_equal(cams[0].messages[0].data, cams[1].messages[0].data)
        last = joints.messages[-1]
        q = dict(zip(last.name, last.position))
        assert len(last.name) == 18 and last.name[6:9] == ["left_gripper", "left_left_finger", "left_right_finger"]
        np.testing.assert_allclose([q[n] for n in names], target, atol=0.06)
        assert q["left_left_finger"] == pytest.approx(0.057, abs=0.002)  # open: the finger's range end
        assert q["right_left_finger"] == pytest.approx(float(units.gripper_joint_to_finger(0.3)), abs=0.002)
        assert q["right_gripper"] == pytest.approx(float(units.finger_to_gripper_joint(q["right_left_finger"])), abs=1e-9)
        assert q["left_right_finger"] == pytest.approx(-q["left_left_finger"])
        # Each puppet's joint states also on its own topic with unprefixed names, as Interbotix publishes them.
        at = stamp_to_ns(last.header.stamp)
        same = lambda p: [m for m in p.messages if stamp_to_ns(m.header.stamp) == at]  # noqa: E731
        assert spin_until(executor, lambda: all(same(p) for p in puppets), timeout=30), sim.output()
        for side, puppet in zip(("left", "right"), puppets):
            own = same(puppet)[-1]
            assert list(own.name) == [*units.ARM_JOINTS, "gripper", "left_finger", "right_finger"]
            assert list(own.position) == [q[f"{side}_{n}"] for n in own.name]
    finally:
        assert sim.stop() == 0, sim.output()
        executor.shutdown()
        node.destroy_node()


def _config(tmp_path: Path, change: dict) -> Path:
    data = yaml.safe_load(ALOHA_YAML.read_text())
    data["/**"]["ros__parameters"].update(change)
    path = tmp_path / "config" / "robots" / "aloha_changed.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


# Each breaks one thing of the config the way a wrong URDF axis or a swapped gripper calibration would: the
# sign of the right shoulder (state and command: the right arm picks the cube up), or the right gripper's
# command with open and closed swapped. The left gripper's closing could not break it: gym-aloha's reward 4
# comes when the left fingers touch the lifted cube, before they close.
SWAPPED = f"linear({units.GRIPPER_JOINT_CLOSED_RAD - units.GRIPPER_JOINT_OPEN_RAD:.4f}, {units.GRIPPER_JOINT_OPEN_RAD})"
BROKEN = {
    "joint_sign": {"joint_conversions": ["identity"] * 8 + ["linear(-1.0, 0.0)"] + ["identity"] * 4 + ["aloha_gripper_position"],
                   "output_conversions": ["6x identity", "aloha_gripper_joint", "identity; linear(-1.0, 0.0); 4x identity",
                                          "aloha_gripper_joint"]},
    "gripper": {"output_conversions": ["6x identity", "aloha_gripper_joint", "6x identity", SWAPPED]},
}


@pytest.mark.parametrize("broken", [None, "ros2_control", *BROKEN])
def test_expert_through_aloha_yaml_transfers_the_cube_and_a_broken_conversion_does_not(tmp_path, broken: str | None) -> None:
    """The expert's actions as model outputs (openpi ALOHA space) through the node's adapter, the config's
    conversions and outputs over DDS into the MuJoCo arms: the cube is transferred through aloha.yaml's Interbotix
    topics (the simulated xs_sdk accepts every command of the episode: group and joint names, six values, inside the
    joint limits) and through the ros2_control form; with a joint sign or the gripper broken in the config it is not."""
    params = {None: ALOHA_YAML, "ros2_control": ROS2_CONTROL_YAML}.get(broken) or _config(tmp_path, BROKEN[broken])
    result, expert = through_outputs(params, [3], tmp_path / "work", image_size=(32, 32), fast_render=True,
                                     episode_steps=STEPS, timeout_s=600)  # fmt: skip
    (episode,) = result.episodes
    s = result.sim_stats
    assert s["timeouts"] == 0 and expert.chunks == s["answers"] == s["queries"] > 0
    # An observation reaches the node 20 ms of wall time before the clock tick that makes it due; on a loaded
    # machine the node may tick before it arrived and answer from the one before: seen, counted, rare (a trajectory
    # carries its observation's stamp; a streamed Interbotix command does not, so only the node counts those).
    assert expert.stale_frames <= s["queries"] // 4
    if broken == "ros2_control":
        assert expert.stale_frames == s["stale_answers"] and s["xs_commands"] == 0
    else:  # xs_sdk's topics: one arm and one gripper command per step and puppet, none refused
        assert s["xs_refused"] == 0 and s["xs_commands"] >= 4 * episode["steps"], s
    if broken in (None, "ros2_control"):
        assert episode["success"] and episode["success_step"] < STEPS, episode
    else:
        assert not episode["success"], (broken, episode)


def test_simulated_xs_sdk_refuses_what_the_driver_refuses(ros_context) -> None:
    """The MuJoCo ALOHA on xs_sdk's topics (interbotix_robots) takes JointGroupCommand / JointSingleCommand as the
    driver does: another group or joint name, another count of values, a position outside the joint limits (after
    arm.py's 3-decimal truncation) or a non-finite value are refused outright and counted; a good command is not."""
    from interbotix_xs_msgs.msg import JointGroupCommand, JointSingleCommand
    from rclpy.parameter import Parameter

    from oxygen_ros.sim_ros.aloha_sim_node import AlohaSimNode

    robots = ["follower_left", "follower_right"]
    sim = AlohaSimNode(parameter_overrides=[Parameter("interbotix_robots", value=robots), Parameter("episodes", value=1)])
    node, executor = make_test_node("xs_sdk_commander")
    executor.add_node(sim)
    try:
        group = node.create_publisher(JointGroupCommand, "/follower_left/commands/joint_group", RELIABLE)
        single = node.create_publisher(JointSingleCommand, "/follower_right/commands/joint_single", RELIABLE)
        states = Collector(node, JointState, "/follower_right/joint_states", qos_profile_sensor_data)
        assert wait_for_match(executor, [group, single], timeout=30)
        good = [0.0, -0.96, 1.16, 0.0, -0.3, 0.0]
        shoulder_edge = [0.0, 1.2566999, 1.16, 0.0, -0.3, 0.0]  # truncated to 1.256: inside 1.25664, as arm.py takes it
        refused = [("arms", good), ("arm", good[:5]), ("arm", [0.0, 1.2576, 1.16, 0.0, -0.3, 0.0]),
                   ("arm", [0.0, -0.96, -1.77, 0.0, -0.3, 0.0]), ("arm", [float("nan")] * 6)]  # fmt: skip
        for name, cmd in [("arm", good), ("arm", shoulder_edge), *refused]:
            group.publish(JointGroupCommand(name=name, cmd=cmd))
        single.publish(JointSingleCommand(name="gripper", cmd=0.3))
        single.publish(JointSingleCommand(name="left_finger", cmd=0.3))
        assert spin_until(executor, lambda: sim.stats["xs_commands"] == 9, timeout=30), sim.stats
        assert sim.stats["xs_refused"] == len(refused) + 1
        accepted = {kind: [c for k, _, c in sim._inbox if k == kind] for kind in ("group", "gripper")}  # two topics: any order
        assert accepted["group"] == [pytest.approx(good, abs=1e-6), pytest.approx(shoulder_edge, abs=1e-6)]  # float32 cmd
        assert accepted["gripper"] == [[pytest.approx(0.3, abs=1e-6)]]
        sim._publish_observation(0, images=False)  # each robot's joint states on its own topic, names unprefixed
        assert spin_until(executor, lambda: len(states) >= 1, timeout=30)
        assert list(states.messages[-1].name) == [*units.ARM_JOINTS, "gripper", "left_finger", "right_finger"]
    finally:
        executor.shutdown()
        sim.destroy_node()
        node.destroy_node()


def test_oxygen_node_with_aloha_yaml_and_a_small_pi05_closes_the_loop(tmp_path) -> None:
    """The real runtime on an ALOHA-shaped random-weight checkpoint (three cameras, 14 of 32 dims, openpi layout)
    with aloha.yaml's wiring: every observation answered in lockstep, no chunk late in sim time."""
    checkpoint, tokenizer = write_small_checkpoint(tmp_path)
    values = node_values(ALOHA_YAML, {"checkpoint": str(checkpoint), "tokenizer": str(tokenizer), "device": "cpu",
                                      "dtype": "float32", "num_threads": 1, "diagnostics_period_s": 0.2,
                                      # a random model: its chunks clamped into range, never refused
                                      "limit_out_of_range_margin": 100.0})  # fmt: skip
    result = run_loop(values, [0], image_size=(48, 64), fast_render=True, episode_steps=100, timeout_s=600)
    s, d = result.sim_stats, result.diagnostics
    assert result.query_every_steps == 25  # aloha.yaml: 25 actions of each chunk at 50 Hz, as openpi's aloha_real
    assert result.episodes[0]["steps"] == 100 and s["queries"] == 4
    assert s["answers"] == s["queries"] and s["timeouts"] == 0 and s["rejected"] == 0 and s["stale_answers"] <= 1
    assert float(d["chunk_latency_s max"]) == 0.0 or s["stale_answers"]  # observation to published chunk in sim time
    assert int(d["chunks_published"]) >= s["queries"] - 1  # the last report: up to 0.2 s of sim time before the end
    assert float(d["input_age_s /cam_high/image_raw max"]) == 0.0


def test_sim_node_at_wall_clock_pace_without_a_policy(ros_context) -> None:
    """lockstep: false runs the steps at the wall clock's pace, waiting for nobody; bad wiring is refused at start."""
    node, executor = make_test_node("aloha_clock_listener")
    clock = Collector(node, Clock, "/clock", RELIABLE)
    args = ["-p", "lockstep:=false", "-p", "wait_for_commander_s:=0.0", "-p", "episodes:=1", "-p", "episode_steps:=400",
            "-p", "image_width:=32", "-p", "image_height:=32", "-p", "fast_render:=true", "-p", "exit_when_done:=false"]  # fmt: skip
    with NodeProcess([REPO / "config" / "aloha_sim.yaml"], module="oxygen_ros.sim_ros.main", ros_args=args) as sim:
        assert spin_until(executor, lambda: len(clock) >= 20, timeout=60), sim.output()  # (8 s of steps: discovery fits)
        stamps = [stamp_to_ns(m.clock) for m in clock.messages[:20]]
        assert stamps[-1] - stamps[0] == 19 * 20_000_000
        assert 0.3 < clock.times[19] - clock.times[0] < 3.0  # 19 steps of 20 ms: never faster than the wall clock
    bad = NodeProcess([REPO / "config" / "aloha_sim.yaml"], module="oxygen_ros.sim_ros.main",
                      ros_args=["-p", "camera_names:=[top, cam_low, right_wrist]"]).start()  # fmt: skip
    assert bad.wait(timeout=60) == 1 and "camera_names ['cam_low'] are not cameras of the scene" in bad.output()
    executor.shutdown()
    node.destroy_node()
