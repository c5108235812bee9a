"""The log of a node serving several robots, as /rosout carries it: every robot gets its own start-up line, its own
throttled warnings, and one line when its inputs are lost (and one when they are back) instead of a warning per
tick. Real rclpy over DDS (loopback only)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import rclpy
from oxygen_ros_msgs.msg import ActionChunk
from rcl_interfaces.msg import Log
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState

from ros_helpers import Collector, FakeRuntime, make_test_node, spin_for, spin_until, wait_for_match

from oxygen_ros.interface.convert import array_to_image, ns_to_stamp
from oxygen_ros.ros.node import OxygenNode
from oxygen_ros.ros.robot_log import WARN_THROTTLE_S

JOINTS = ["j1", "j2", "j3"]
ROBOTS = ("arm1", "arm2")  # names that differ only in a digit
RELIABLE = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)


@pytest.fixture()
def ros_context():  # noqa: ANN201
    rclpy.init()
    yield
    rclpy.shutdown()


class _Inputs:
    """One robot's camera and joint state publishers on the test's side."""

    def __init__(self, driver: Any, robot: str) -> None:
        self.driver = driver
        self.camera = driver.create_publisher(Image, f"/{robot}/camera/image", qos_profile_sensor_data)
        self.joints = driver.create_publisher(JointState, f"/{robot}/joint_states", qos_profile_sensor_data)

    def publish(self, encoding: str = "rgb8") -> None:
        now = self.driver.get_clock().now().nanoseconds
        image = array_to_image(np.zeros((8, 8, 3), np.uint8), "rgb8", stamp=now)
        image.encoding = encoding  # "bogus": refused by the node, with a warning
        self.camera.publish(image)
        joints = JointState(name=JOINTS, position=[0.1, 0.2, 0.3])
        joints.header.stamp = ns_to_stamp(now)
        self.joints.publish(joints)


def test_each_robot_has_its_own_warnings_and_one_line_when_its_inputs_are_lost(ros_context) -> None:  # noqa: ANN001
    values: dict[str, Any] = {"robots": list(ROBOTS), "camera_topics": ["camera/image"], "joint_names": JOINTS,
                              "default_instruction": "go", "control_rate_hz": 20.0, "max_observation_age_s": 0.5}
    node = OxygenNode("logs_node", runtime_loader=FakeRuntime.loader(action_dim=3),
                      parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])  # fmt: skip
    driver, executor = make_test_node("logs_driver")
    executor.add_node(node)
    rosout = Collector(driver, Log, "/rosout", RELIABLE)
    inputs = {r: _Inputs(driver, r) for r in ROBOTS}
    chunks = {r: Collector(driver, ActionChunk, f"/{r}/logs_node/action_chunk", RELIABLE) for r in ROBOTS}

    def lines(robot: str, text: str, since: int = 0) -> list[str]:
        return [m.msg for m in rosout.messages[since:] if m.msg.startswith(f"robot {robot}: ") and text in m.msg]

    try:
        assert wait_for_match(executor, [rosout.subscription, *(c.subscription for c in chunks.values()),
                                         *(p for i in inputs.values() for p in (i.camera, i.joints))])

        # Start-up without inputs: one info line per robot (rclpy's `once` would let only the first robot say it).
        waiting = lambda: all(lines(r, "waiting for the first inputs") for r in ROBOTS)  # noqa: E731
        assert spin_until(executor, waiting, timeout=10), [m.msg for m in rosout.messages]
        spin_for(executor, 1.0)
        assert [len(lines(r, "waiting for the first inputs")) for r in ROBOTS] == [1, 1]

        # Both robots send images the node refuses: each robot's warning is throttled on its own.
        start, seconds = len(rosout), 3 * WARN_THROTTLE_S - 0.5
        spin_for(executor, seconds, every=(0.05, lambda: [i.publish("bogus") for i in inputs.values()]))
        spin_for(executor, 0.3)  # the last lines on their way
        refused = [len(lines(r, "encoding", start)) for r in ROBOTS]
        assert all(n >= 2 for n in refused) and abs(refused[0] - refused[1]) <= 1, refused  # ~3 each, not ~3 in all

        # Good inputs: both get chunks. Then arm2's inputs stop: one line for arm2 (not one per tick), arm1 goes on.
        both = lambda: [i.publish() for i in inputs.values()]  # noqa: E731
        assert spin_until(executor, lambda: all(len(c) >= 3 for c in chunks.values()), timeout=15, every=(0.05, both))
        start = len(rosout)
        arm1_before = len(chunks["arm1"])
        spin_for(executor, 2 * WARN_THROTTLE_S + 1.0, every=(0.05, inputs["arm1"].publish))
        assert len(lines("arm2", "inputs lost", start)) == 1, [m.msg for m in rosout.messages[start:]]
        assert "stale" in lines("arm2", "inputs lost", start)[0] or "away from now" in lines("arm2", "inputs lost", start)[0]
        assert lines("arm2", "no action chunk this tick", start) == []
        assert lines("arm1", "inputs lost", start) == [] and len(chunks["arm1"]) - arm1_before >= 40
        arm2_before = len(chunks["arm2"])
        back = lambda: bool(lines("arm2", "inputs are back", start))  # noqa: E731
        assert spin_until(executor, back, timeout=10, every=(0.05, both))
        assert spin_until(executor, lambda: len(chunks["arm2"]) > arm2_before, timeout=10, every=(0.05, both))
    finally:
        node.finish(timeout_s=0.2)  # the model thread stops before the node goes
        executor.shutdown()
        node.destroy_node()
        driver.destroy_node()
