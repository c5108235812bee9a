"""One oxygen_node serving several robots (the `robots` parameter): each robot's topics, outputs and ~/ask
resolve under its namespace, one engine tick serves the robots that are due, and a robot without inputs is
skipped without holding the others back. Real rclpy over DDS (loopback only)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from oxygen_ros_msgs.msg import ActionChunk
from rclpy.action import get_action_names_and_types
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from ros_helpers import (REPO, Collector, FakeRuntime, NodeProcess, make_test_node, spin_for, spin_until, wait_for_match,
                         write_params)

from oxygen_ros.interface.convert import array_to_image, ns_to_stamp
from oxygen_ros.interface.topic_names import robot_topic
from oxygen_ros.ros.node import OxygenNode
from oxygen_ros.ros.robot_clocks import RobotClocks, robot_phases

JOINTS = ["j1", "j2", "j3"]
RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


def test_robot_topics_resolve_as_a_one_robot_node_in_the_robots_namespace() -> None:
    assert robot_topic("", "camera/image", "oxygen_node") == "camera/image"
    assert robot_topic("", "/abs", "oxygen_node") == "/abs"
    assert robot_topic("arm1", "camera/image", "oxygen_node") == "arm1/camera/image"
    assert robot_topic("arm1", "~/ask", "oxygen_node") == "arm1/oxygen_node/ask"
    assert robot_topic("arm1", "~/text/language", "policy") == "arm1/policy/text/language"
    with pytest.raises(ValueError, match="absolute"):
        robot_topic("arm1", "/camera", "oxygen_node")


def test_robots_tick_at_their_own_rates_and_slower_robots_are_spread_over_the_timer_ticks() -> None:
    phases = robot_phases({"a": 0.1, "b": 0.2, "c": 0.2, "d": 0.2}, 0.1)
    assert phases == pytest.approx({"a": 0, "b": 0, "c": 0.1, "d": 0.1})
    assert robot_phases({"a": 0.2, "b": 0.2}, 0.2) == {"a": 0, "b": 0}  # the fastest share every tick (one batch)
    clocks = RobotClocks({"fast": 0.2, "slow": 0.4})
    jitter = [0.0, -0.01, 0.02, 0.0, -0.03, 0.01, 0.0, 0.0]  # the timer fires a little early or late
    ticks = [clocks.due(100.0 + 0.2 * i + j) for i, j in enumerate(jitter)]
    assert ticks == [["fast"], ["fast", "slow"]] * 4
    assert clocks.due(50.0) == ["fast"]  # the clock went back (a bag replayed again): the clocks start over
    assert clocks.due(50.2) == ["fast", "slow"]


@pytest.fixture()
def ros_context():  # noqa: ANN201
    rclpy.init()
    yield
    rclpy.shutdown()


def _joint_state(stamp: int) -> JointState:
    msg = JointState(name=JOINTS, position=[0.1, 0.2, 0.3])
    msg.header.stamp = ns_to_stamp(stamp)
    return msg


def test_each_robot_has_its_own_topics_and_a_robot_without_inputs_does_not_hold_the_others(ros_context) -> None:  # noqa: ANN001
    load = FakeRuntime.loader(action_dim=3)
    values: dict[str, Any] = {"robots": ["left", "right"], "camera_topics": ["camera/image"], "joint_names": JOINTS,
                              "default_instruction": "go", "control_rate_hz": 20.0}  # fmt: skip
    node = OxygenNode("fleet_node", namespace="/cell", runtime_loader=load,
                      parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])  # fmt: skip
    runtime = load.made[0]
    driver, executor = make_test_node("fleet_driver")
    executor.add_node(node)
    try:
        assert len(load.made) == 1 and runtime.robots == ["", "right"]  # one model; the first robot is the engine's own
        names = dict(node.get_topic_names_and_types())
        for robot in ("left", "right"):
            for topic in ("camera/image", "joint_states", "fleet_node/instruction", "fleet_node/action_chunk", "fleet_node/text/language", "fleet_node/text/memory/final",
                          "joint_trajectory_controller/joint_trajectory"):  # fmt: skip
                assert f"/cell/{robot}/{topic}" in names, (robot, topic, sorted(names))
        assert not any(t.startswith("/cell/camera") or t.startswith("/cell/fleet_node/action") for t in names)
        actions = {n for n, _ in get_action_names_and_types(node)}
        assert {"/cell/left/fleet_node/ask", "/cell/right/fleet_node/ask"} <= actions, sorted(actions)

        cam = driver.create_publisher(Image, "/cell/left/camera/image", qos_profile_sensor_data)
        joints = driver.create_publisher(JointState, "/cell/left/joint_states", qos_profile_sensor_data)
        left = Collector(driver, ActionChunk, "/cell/left/fleet_node/action_chunk", RELIABLE)
        left_traj = Collector(driver, JointTrajectory, "/cell/left/joint_trajectory_controller/joint_trajectory", RELIABLE)
        right = Collector(driver, ActionChunk, "/cell/right/fleet_node/action_chunk", RELIABLE)
        diagnostics = Collector(driver, DiagnosticArray, "/diagnostics", RELIABLE)
        assert wait_for_match(executor, [cam, joints, left.subscription, right.subscription])

        def publish_left() -> None:
            now = driver.get_clock().now().nanoseconds
            cam.publish(array_to_image(np.zeros((8, 8, 3), np.uint8), "rgb8", stamp=now))
            joints.publish(_joint_state(now))

        # Only the left robot has inputs: it gets chunks at the control rate, the right one is skipped.
        assert spin_until(executor, lambda: len(left) >= 8, timeout=20, every=(0.02, publish_left))
        assert len(right) == 0 and len(left_traj) >= 5
        assert runtime.many_calls and all(call == [""] for call in runtime.many_calls)  # "" = left, the engine's first
        statuses: dict[str, Any] = {}

        def reported() -> bool:
            statuses.update({s.name: s for m in diagnostics.messages for s in m.status})
            return "oxygen_ros: left: control" in statuses

        assert spin_until(executor, reported, timeout=10, every=(0.02, publish_left))
        assert "oxygen_ros: left: control" in statuses and "oxygen_ros: right: control" in statuses
        assert statuses["oxygen_ros: right: control"].message.startswith("no action chunk yet: missing_image")
        assert statuses["oxygen_ros: left: control"].message != statuses["oxygen_ros: right: control"].message

        # Now the right robot has inputs too: both are served in the same engine ticks.
        cam_r = driver.create_publisher(Image, "/cell/right/camera/image", qos_profile_sensor_data)
        joints_r = driver.create_publisher(JointState, "/cell/right/joint_states", qos_profile_sensor_data)
        assert wait_for_match(executor, [cam_r, joints_r])

        def publish_both() -> None:
            publish_left()
            now = driver.get_clock().now().nanoseconds
            cam_r.publish(array_to_image(np.full((8, 8, 3), 9, np.uint8), "rgb8", stamp=now))
            joints_r.publish(_joint_state(now))

        assert spin_until(executor, lambda: len(right) >= 5, timeout=20, every=(0.02, publish_both))
        assert ["", "right"] in runtime.many_calls
    finally:
        executor.shutdown()
        node.destroy_node()
        driver.destroy_node()


def _ask_servers(executor: Any, driver: Any, expected: set[str]) -> set[str]:
    """The ~/ask action servers the ROS graph lists (as `ros2 action list` does), once `expected` appear."""
    found: set[str] = set()

    def listed() -> bool:
        found.clear()
        found.update(n for n, _ in get_action_names_and_types(driver) if n.endswith("/ask"))
        return expected <= found

    spin_until(executor, listed, timeout=15)
    spin_for(executor, 0.5)  # a stray server would be discovered together with the others; give it a moment more
    listed()
    return found


@pytest.mark.parametrize("managed", [False, True], ids=["plain", "managed"])
def test_one_ask_server_per_robot_and_none_at_the_root(ros_context, managed: bool) -> None:  # noqa: ANN001
    from oxygen_ros.ros.lifecycle import OxygenLifecycleNode

    make = OxygenLifecycleNode if managed else OxygenNode
    values: dict[str, Any] = {"camera_topics": ["camera/image"], "joint_names": JOINTS, "default_instruction": "go"}
    fleet = make("asks_fleet", namespace="/cell", runtime_loader=FakeRuntime.loader(action_dim=3),
                 parameter_overrides=[Parameter(k, value=v) for k, v in {**values, "robots": ["arm1", "arm2"]}.items()])
    single = make("asks_single", namespace="/cell", runtime_loader=FakeRuntime.loader(action_dim=3),
                  parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    driver, executor = make_test_node("asks_driver")
    executor.add_node(fleet)
    executor.add_node(single)
    try:
        # Before configure (managed) and after it: the same servers, the robots' in fleet mode, the root one otherwise.
        expected = {"/cell/arm1/asks_fleet/ask", "/cell/arm2/asks_fleet/ask", "/cell/asks_single/ask"}
        assert _ask_servers(executor, driver, expected) == expected
        if managed:
            refused = fleet.set_parameters([Parameter("robots", value=["arm1"])])[0]
            assert not refused.successful  # the robots name the node's action servers: fixed for its life
            for node in (fleet, single):
                assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
                assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            assert _ask_servers(executor, driver, expected) == expected
        assert [p.ask.name for p in fleet._ports] == ["arm1/asks_fleet/ask", "arm2/asks_fleet/ask"]
    finally:
        executor.shutdown()
        for node in (fleet, single, driver):
            node.destroy_node()


def test_each_robot_gets_chunks_at_its_own_rate_with_its_own_step_period(ros_context) -> None:  # noqa: ANN001
    load = FakeRuntime.loader(action_dim=3)
    robots = ("fast", "slow")
    values: dict[str, Any] = {"robots": list(robots), "robot_control_rates_hz": [5.0, 2.5],
                              "camera_topics": ["camera/image"], "joint_names": JOINTS, "default_instruction": "go"}  # fmt: skip
    node = OxygenNode("rates_node", runtime_loader=load,
                      parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])  # fmt: skip
    runtime = load.made[0]
    driver, executor = make_test_node("rates_driver")
    executor.add_node(node)
    try:
        assert node._control_timer.timer_period_ns == 200_000_000  # the fastest robot's rate
        assert [p.diag.target_rate_hz for p in node._ports] == [5.0, 2.5]  # /diagnostics: each robot's own target
        inputs = [(driver.create_publisher(Image, f"/{r}/camera/image", qos_profile_sensor_data),
                   driver.create_publisher(JointState, f"/{r}/joint_states", qos_profile_sensor_data)) for r in robots]
        chunks = {r: Collector(driver, ActionChunk, f"/{r}/rates_node/action_chunk", RELIABLE) for r in robots}
        endpoints = [e for pair in inputs for e in pair] + [c.subscription for c in chunks.values()]
        assert wait_for_match(executor, endpoints)

        def publish() -> None:
            now = driver.get_clock().now().nanoseconds
            for cam, joints in inputs:
                cam.publish(array_to_image(np.zeros((8, 8, 3), np.uint8), "rgb8", stamp=now))
                joints.publish(_joint_state(now))

        started = lambda: all(len(c) >= 1 for c in chunks.values())  # noqa: E731
        assert spin_until(executor, started, timeout=20, every=(0.02, publish))
        for c in chunks.values():
            c.clear()
        assert spin_until(executor, lambda: len(chunks["slow"]) >= 6, timeout=20, every=(0.02, publish))
        fast, slow = len(chunks["fast"]), len(chunks["slow"])
        assert 1.5 <= fast / slow <= 2.6, (fast, slow)  # twice as many, give or take a tick at each end
        period_s = {r: {m.step_period.sec + m.step_period.nanosec / 1e9 for m in c.messages} for r, c in chunks.items()}
        assert period_s == {"fast": {0.2}, "slow": {0.4}}
        assert {p for p, _ in runtime.step_calls} == {0.2, 0.4}  # real-time chunking is guided with each robot's period
        assert ["", "slow"] in runtime.many_calls and [""] in runtime.many_calls  # the slow robot every other tick

        # Changed at runtime: the timer follows the fastest rate, the diagnostics each robot's.
        assert node.set_parameters([Parameter("robot_control_rates_hz", value=[4.0, 10.0])])[0].successful
        assert node._control_timer.timer_period_ns == 100_000_000
        assert [p.diag.target_rate_hz for p in node._ports] == [4.0, 10.0]
        assert not node.set_parameters([Parameter("robot_control_rates_hz", value=[4.0])])[0].successful
    finally:
        executor.shutdown()
        node.destroy_node()
        driver.destroy_node()


def test_two_simulated_arms_driven_by_one_node_both_pick_up_and_narrate(tmp_path) -> None:  # noqa: ANN001
    """The committed demo policy drives two simulated arms, each in its own namespace with its own scene and
    instruction, from ONE oxygen_node process: both pick up their objects and both narrate."""
    rclpy.init()
    node, executor = make_test_node("two_arms_test")
    arms = ("arm1", "arm2")
    episodes = {a: Collector(node, String, f"/{a}/oxygen_sim_node/episode", LATCHED) for a in arms}
    narration = {a: Collector(node, String, f"/{a}/oxygen_node/text/language/final", 50) for a in arms}
    trajectories = {a: Collector(node, JointTrajectory, f"/{a}/joint_trajectory_controller/joint_trajectory", 10) for a in arms}
    sims = []
    try:
        with NodeProcess([REPO / "config" / "demo_policy.yaml"], ros_args=["-p", "robots:=[arm1,arm2]"]) as policy:
            for i, arm in enumerate(arms):
                params = write_params(tmp_path / f"{arm}.yaml", {"episodes": 1, "seed": 40 + i, "wait_for_commander_s": 60.0})
                sims.append(NodeProcess([REPO / "config" / "demo_sim.yaml", params], ros_args=["-r", f"__ns:=/{arm}"],
                                        module="oxygen_ros.sim_ros.main").start())  # fmt: skip
            ended = lambda: all(any('"end"' in m.data for m in episodes[a].messages) for a in arms)  # noqa: E731
            assert spin_until(executor, ended, 150.0), policy.output() + "".join(s.output() for s in sims)
            assert "serving 2 robots from one model" in policy.output(), policy.output()
            for sim in sims:  # the start waits for the node; it is restated then, and its instruction logged once
                assert sim.wait(30.0) == 0, sim.output()
                assert sim.output().count("episode 1: '") == 1, sim.output()
        results = {a: [json.loads(m.data) for m in episodes[a].messages if '"end"' in m.data][0] for a in arms}
        starts = {a: [json.loads(m.data) for m in episodes[a].messages if '"start"' in m.data][0] for a in arms}
        assert starts["arm1"]["instruction"] != starts["arm2"]["instruction"] or starts["arm1"]["seed"] != starts["arm2"]["seed"]
        for arm in arms:
            assert results[arm]["success"], (arm, results[arm], starts[arm])
            assert len(trajectories[arm]) >= 3 and len(narration[arm]) >= 1, arm
    finally:
        for sim in sims:
            sim.close()
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown()
