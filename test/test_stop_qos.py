"""A stop on `~/stop` reaches the node from every reliable publisher, over DDS: a latched one (transient local) that
set the stop before the node started, a volatile one as `ros2 topic pub --once`, an e-stop bridge or a joystick
creates, and a latched one heard live. A best-effort publisher, which no reliable reader can hear, is warned
about in the log and counted in the safety status of /diagnostics.

The node (`config/demo.yaml`, the tiny model, commanding its joint trajectory controller) runs in its own
process; this test publishes its camera and joint states (system time) and watches the commands: a hold is a
trajectory of at most one point, a moving command has more.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from oxygen_ros_msgs.msg import ActionChunk
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.interface.convert import array_to_image, ns_to_stamp

from ros_helpers import REPO, Collector, NodeProcess, make_test_node, spin_until, wait_for_match, write_params

TOPIC = "/oxygen_node/stop"
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
VOLATILE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)  # ros2 topic pub's
BEST_EFFORT = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT, durability=DurabilityPolicy.VOLATILE)
RELIABLE = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE)
JOINTS = [f"panda_joint{i}" for i in range(1, 8)]
CONTROL_PERIOD_S = 0.2  # config/demo.yaml: 5 Hz
# The stop and the hold it sends cross DDS twice and wait for the executors of two processes on a busy machine.
DELIVERY_SLACK_S = 0.25


@pytest.fixture(scope="module")
def ros_context():  # noqa: ANN201
    rclpy.init()
    yield
    rclpy.shutdown()


def test_a_stop_from_a_volatile_or_a_latched_publisher_stops_the_node(ros_context, tmp_path: Path) -> None:  # noqa: ANN001
    node, executor = make_test_node("stop_qos_driver")
    latched = node.create_publisher(Bool, TOPIC, LATCHED)
    latched.publish(Bool(data=True))  # before the node exists: only its history can deliver it
    camera = node.create_publisher(Image, "/camera/base/image_raw", qos_profile_sensor_data)
    joints = node.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
    commands = Collector(node, JointTrajectory, "/joint_trajectory_controller/joint_trajectory", RELIABLE)
    chunks = Collector(node, ActionChunk, "/oxygen_node/action_chunk", RELIABLE)
    safety: list[dict[str, str]] = []
    node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: safety.extend(
        {kv.key: kv.value for kv in s.values} for s in m.status if s.name.endswith("safety")), RELIABLE)  # fmt: skip
    image = np.full((32, 32, 3), 90, np.uint8)

    def publish() -> None:  # what a robot sends, stamped with the clock now
        now = node.get_clock().now().nanoseconds
        camera.publish(array_to_image(image, "rgb8", stamp=now))
        msg = JointState(name=JOINTS, position=[0.0, 0.0, 0.0, -1.5, 0.0, 1.5, 0.0])
        msg.header.stamp = ns_to_stamp(now)
        joints.publish(msg)

    every = (1 / 30, publish)

    def moving_since(t: float) -> list[float]:
        return [r for m, r in zip(commands.messages, commands.times) if r > t and len(m.points) > 1]

    def holds_since(t: float) -> list[float]:
        return [r for m, r in zip(commands.messages, commands.times) if r > t and len(m.points) <= 1]

    params = write_params(tmp_path / "params.yaml", {"limit_out_of_range_margin": 100.0,  # a random model: clamped
                                                     "diagnostics_period_s": 0.5})  # fmt: skip
    proc = NodeProcess([REPO / "config" / "demo.yaml", params]).start()
    try:
        def logged(text: str) -> bool:
            return text in proc.output() or not proc.running

        # 1. The latched stop set before the node started: chunks come (the model goes on), commands hold at the
        # latest one control period after the first (its history arrives as discovery completes: on a busy machine
        # the first chunk may be quicker).
        assert spin_until(executor, lambda: logged("STOP set by the stop topic"), 120, every=every), proc.output()[-3000:]
        assert spin_until(executor, lambda: len(chunks) >= 5 or not proc.running, 60, every=every), proc.output()[-3000:]
        first_command = min(commands.times, default=float("inf"))
        early = [t - first_command for t in moving_since(0.0)]
        assert all(t <= CONTROL_PERIOD_S + DELIVERY_SLACK_S for t in early) and proc.running, (early, proc.output()[-3000:])
        assert not moving_since(first_command + CONTROL_PERIOD_S + DELIVERY_SLACK_S)
        # 2. Cleared by the latched publisher, heard live: commands move again.
        latched.publish(Bool(data=False))
        t_cleared = time.monotonic()
        assert spin_until(executor, lambda: bool(moving_since(t_cleared)) or not proc.running, 30, every=every), proc.output()[-3000:]
        # 3. A volatile publisher made when needed, as `ros2 topic pub --once` does: matched, one message.
        volatile = node.create_publisher(Bool, TOPIC, VOLATILE)
        assert wait_for_match(executor, [volatile], timeout=30), proc.output()[-3000:]
        assert spin_until(executor, lambda: bool(moving_since(time.monotonic() - 0.5)), 30, every=every)  # commanding now
        volatile.publish(Bool(data=True))
        t_stop = time.monotonic()
        assert spin_until(executor, lambda: bool(holds_since(t_stop)) or not proc.running, 10, every=every), proc.output()[-3000:]
        stop_s = holds_since(t_stop)[0] - t_stop
        spin_until(executor, lambda: not proc.running, 3 * CONTROL_PERIOD_S + 1.0, every=every)  # chunks go on meanwhile
        late_moving = moving_since(t_stop + CONTROL_PERIOD_S + DELIVERY_SLACK_S)
        volatile.publish(Bool(data=False))
        t_clear = time.monotonic()
        assert spin_until(executor, lambda: bool(moving_since(t_clear)) or not proc.running, 30, every=every), proc.output()[-3000:]
        # 4. A best-effort publisher: said and counted, not silent.
        best_effort = node.create_publisher(Bool, TOPIC, BEST_EFFORT)
        best_effort.publish(Bool(data=True))
        assert spin_until(executor, lambda: logged(f"a publisher on {TOPIC} offers incompatible QoS"), 30, every=every)
        assert spin_until(executor, lambda: bool(safety) and safety[-1].get("stop_incompatible_publishers") == "1", 30,
                          every=every), safety[-1:]  # fmt: skip
        assert proc.running, proc.output()[-3000:]
        assert proc.stop(executor=executor) == 0
        log = proc.output()
    finally:
        proc.close()
        executor.shutdown()
        node.destroy_node()
    print(f"\nlatched stop set before start: {len(early)} moving commands before it held, within "
          f"{1e3 * max(early, default=0.0):.0f} ms of the first")
    print(f"volatile stop: first hold {1e3 * stop_s:.0f} ms after publishing (control period {1e3 * CONTROL_PERIOD_S:.0f} ms)")
    assert stop_s <= CONTROL_PERIOD_S + DELIVERY_SLACK_S, stop_s
    assert not late_moving, late_moving
    assert log.count("STOP set by the stop topic") == 2 and log.count("STOP cleared by the stop topic") == 2, log[-3000:]
    assert "offering incompatible QoS" not in log  # rclpy's own warning, were a reader to refuse a writer in the node
