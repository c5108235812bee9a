"""oxygen_sim_node and oxygen_node close the loop over real DDS (loopback only; tiny random-weight model)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from ros_helpers import REPO, Collector, NodeProcess, spin_until, wait_for_match, write_params

from oxygen_ros.interface.convert import image_to_array, stamp_to_ns

LATCHED = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
NS = "/robot1"


@pytest.mark.parametrize("sim_time", [False, True], ids=["wall-clock", "sim-time"])
def test_policy_drives_the_simulated_arm_over_dds(ros, tmp_path, sim_time: bool) -> None:  # noqa: ANN001
    """With sim_time the simulator publishes its own time on /clock and the policy node follows it: every stamp
    on both sides is simulated time (which starts near 0), not the wall clock."""
    node, executor = ros
    sim_params = write_params(tmp_path / "sim.yaml", {"episodes": 2, "seed": 7, "time_limit_s": 2.0, "settle_s": 0.3,
                                                      "instructions": ["", "pick up the purple cup"],
                                                      "publish_clock": sim_time})  # fmt: skip
    # random weights: their chunks clamped into the arm's ranges, never refused by the safety guard
    tiny = write_params(tmp_path / "tiny.yaml", {"checkpoint": "", "tokenizer": "", "model_preset": "tiny",
                                                 "use_sim_time": sim_time, "limit_out_of_range_margin": 100.0})  # fmt: skip
    episodes = Collector(node, String, f"{NS}/oxygen_sim_node/episode", LATCHED)
    joints = Collector(node, JointState, f"{NS}/joint_states", qos_profile_sensor_data)
    wrist = Collector(node, Image, f"{NS}/camera/wrist/image_raw", qos_profile_sensor_data)
    trajectories = Collector(node, JointTrajectory, f"{NS}/joint_trajectory_controller/joint_trajectory", 10)
    language = Collector(node, String, f"{NS}/oxygen_node/text/language/final", 50)
    namespace = ["-r", f"__ns:={NS}"]
    with NodeProcess([REPO / "config" / "demo_policy.yaml", tiny], ros_args=namespace) as policy, \
            NodeProcess([REPO / "config" / "demo_sim.yaml", sim_params], ros_args=namespace,
                        module="oxygen_ros.sim_ros.main") as sim:  # fmt: skip
        ended = spin_until(executor, lambda: sum('"end"' in m.data for m in episodes.messages) == 2, 90.0)
        assert ended, sim.output() + policy.output()
        assert sim.wait(15.0) == 0, sim.output()  # exits by itself after the last episode
        assert policy.running
    events = [json.loads(m.data) for m in episodes.messages]
    assert [(e["event"], e["index"]) for e in events] == [("start", 0), ("end", 0), ("start", 1), ("end", 1)]
    assert events[0]["seed"] == 7 and events[2]["instruction"] == "pick up the purple cup" and events[2]["target"] is None
    assert not events[3]["success"]
    assert len(trajectories) >= 3 and len(language) >= 1  # the policy answered the simulator's observations
    positions = np.array([m.position for m in joints.messages])
    assert list(joints.messages[0].name) == ["arm_yaw", "arm_shoulder", "arm_elbow", "gripper"]
    assert np.ptp(positions[:, :3], axis=0).max() > 0.01  # the arm moved under the policy's trajectories
    assert image_to_array(wrist.messages[-1]).shape == (64, 64, 3)
    stamps = [stamp_to_ns(m.header.stamp) for m in (*joints.messages, *trajectories.messages, *wrist.messages)]
    simulated = [0 < s < 3600 * 10**9 for s in stamps if s]  # sim time starts at one physics step
    assert simulated and all(simulated) if sim_time else not any(simulated)
    assert all(0 < e["stamp_ns"] < 3600 * 10**9 for e in events) == sim_time


def test_sim_node_refuses_bad_trajectories_and_keeps_running(ros, tmp_path) -> None:  # noqa: ANN001
    node, executor = ros
    params = write_params(tmp_path / "sim.yaml", {"episodes": 1, "time_limit_s": 30.0, "settle_s": 0.0})
    joints = Collector(node, JointState, "/joint_states", qos_profile_sensor_data)
    pub = node.create_publisher(JointTrajectory, "/joint_trajectory_controller/joint_trajectory", 10)
    with NodeProcess([params], module="oxygen_ros.sim_ros.main") as sim:
        assert wait_for_match(executor, [pub], 30.0), sim.output()
        assert spin_until(executor, lambda: len(joints) > 0, 30.0)
        start = np.array(joints.messages[-1].position)

        def send(names: list[str], points: list[tuple[list[float], float]]) -> None:
            msg = JointTrajectory()
            msg.joint_names = names
            for pos, t in points:
                p = JointTrajectoryPoint()
                p.positions = pos
                p.time_from_start.sec, p.time_from_start.nanosec = int(t), int(round((t % 1) * 1e9))
                msg.points.append(p)
            pub.publish(msg)

        send(["a", "b"], [([1.0, 1.0], 0.5)])  # unknown joints
        send(["arm_yaw", "arm_shoulder", "arm_elbow", "gripper"], [([0.3, 0.6, -1.6, 0.08], 0.5), ([0.3, 0.6, -1.6, 0.08], 0.2)])
        send(["arm_yaw", "arm_shoulder", "arm_elbow", "gripper"], [([0.0, 0.6, -1.6, 0.08], 0.4)])  # a good one
        target = np.array([0.0, 0.6, -1.6, 0.08])
        moved = spin_until(executor, lambda: np.allclose(joints.messages[-1].position, target, atol=1e-3), 20.0)
        assert moved, (start, joints.messages[-1].position, sim.output())
        assert sim.running
        assert sim.stop(executor=executor) == 0
        log = sim.output()
    assert "trajectory rejected: joint names do not match" in log and "strictly increase" in log


def test_velocity_output_drives_the_simulated_arm_in_closed_loop(ros) -> None:  # noqa: ANN001
    """The velocity path end to end: joint states → a chunk of joint velocities (a position goal converted by a
    proportional law, as a velocity-trained policy would send) → the node's float64_array velocity output →
    the simulator's velocity forward_command_controller → joint states. The arm reaches the goal."""
    from types import SimpleNamespace

    from rclpy.parameter import Parameter
    from std_msgs.msg import Float64MultiArray

    from oxygen_ros.ros.node import OxygenNode
    from oxygen_ros.sim_ros.sim_node import OxygenSimNode
    from oxygen_ros.sim.scene import JOINT_NAMES
    from ros_helpers import FakeRuntime

    offset = np.array([0.25, -0.15, 0.2, 0.0])

    class VelocityPolicy(FakeRuntime):
        goal: np.ndarray | None = None

        def step(self, frame, step_period_s=None, latency_s=0.0):  # noqa: ANN001, ANN201
            state = np.asarray(frame["state"], dtype=np.float64)
            if self.goal is None:
                self.goal = state + offset
            self._actions = np.tile(np.clip(2.0 * (self.goal - state), -1.0, 1.0), (self.horizon, 1)).astype(np.float32)
            return super().step(frame, step_period_s, latency_s)

    node, executor = ros
    made: list[VelocityPolicy] = []

    def load(config):  # noqa: ANN001, ANN202
        made.append(VelocityPolicy(config, slots=2, action_dim=4))
        return made[-1]

    joints = ",".join(JOINT_NAMES)
    policy_params = {"camera_topics": ["camera/base/image_raw"], "joint_names": list(JOINT_NAMES), "control_rate_hz": 10.0,
                     "default_instruction": "move", "horizon": 5, "output_names": ["arm"], "output_types": ["float64_array"],
                     "output_topics": ["forward_velocity_controller/commands"], "output_dims": ["0..3"],
                     "output_joints": [joints], "output_interfaces": ["velocity"]}  # fmt: skip
    sim_params = {"episodes": 1, "time_limit_s": 60.0, "settle_s": 0.0, "camera_rate_hz": 10.0}
    policy = OxygenNode("oxygen_node", namespace="/velsim", runtime_loader=load,
                        parameter_overrides=[Parameter(k, value=v) for k, v in policy_params.items()])  # fmt: skip
    sim = OxygenSimNode("oxygen_sim_node", namespace="/velsim",
                        parameter_overrides=[Parameter(k, value=v) for k, v in sim_params.items()])  # fmt: skip
    executor.add_node(policy)
    executor.add_node(sim)
    states = Collector(node, JointState, "/velsim/joint_states", qos_profile_sensor_data)
    commands = Collector(node, Float64MultiArray, "/velsim/forward_velocity_controller/commands", 100)
    try:
        reached = lambda: bool(made and made[0].goal is not None and states.messages  # noqa: E731
                               and np.abs(np.array(states.messages[-1].position) - made[0].goal)[:3].max() < 0.02)
        assert spin_until(executor, reached, 40.0), (made[0].goal if made else None, states.messages[-1].position if states.messages else None)
    finally:
        executor.remove_node(policy)
        executor.remove_node(sim)
        policy.destroy_node()
        sim.destroy_node()
    assert len(commands) >= 3 and all(len(m.data) == 4 for m in commands.messages)
    assert not sim.runner.episode or not sim.runner.episode.rejected
