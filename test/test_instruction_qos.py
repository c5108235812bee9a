"""The instruction topic over real DDS: a latched publisher that published before the node started still reaches
it, a plain volatile publisher (as `ros2 topic pub`) reaches it too, and an incompatible one is named in a
warning with its resolved topic. The start without inputs is quiet: one info line, no per-tick warnings."""

from __future__ import annotations

from pathlib import Path

import pytest
import rclpy
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from oxygen_ros.interface.inputs import InputStore

from ros_helpers import REPO, NodeProcess, make_test_node, spin_until, wait_for_match, write_params

TOPIC = "/oxygen_node/instruction"
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
VOLATILE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
BEST_EFFORT = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT, durability=DurabilityPolicy.VOLATILE)


def test_an_instruction_sent_earlier_does_not_replace_a_later_one() -> None:
    store = InputStore(["/cam"], [False], [(0, 0)], use_state=False)
    assert store.put_instruction("wave", recv_ns=5, sent_ns=20) is None
    assert store.put_instruction("stack the blocks", recv_ns=6, sent_ns=10) is None  # a latched copy, late
    assert store.instruction() == "wave"
    assert store.put_instruction("point", recv_ns=7, sent_ns=30) is None
    assert store.put_instruction("nod", recv_ns=8) is None  # no send time: taken as it comes
    assert store.instruction() == "nod"


@pytest.fixture(scope="module")
def ros_context():
    rclpy.init()
    yield
    rclpy.shutdown()


def test_latched_and_volatile_publishers_both_reach_the_node(ros_context, tmp_path: Path) -> None:  # noqa: ANN001
    node, executor = make_test_node("instruction_qos_driver")
    latched = node.create_publisher(String, TOPIC, LATCHED)
    latched.publish(String(data="stack the blocks"))  # before the node exists: only its history can deliver it
    params = write_params(tmp_path / "params.yaml", {"default_instruction": ""})
    proc = NodeProcess([REPO / "config" / "demo.yaml", params]).start()
    try:
        def logged(text: str) -> bool:
            return text in proc.output() or not proc.running

        assert spin_until(executor, lambda: logged("instruction: 'stack the blocks'"), 120), proc.output()
        volatile = node.create_publisher(String, TOPIC, VOLATILE)
        assert wait_for_match(executor, [volatile], timeout=30), proc.output()
        volatile.publish(String(data="wave"))
        assert spin_until(executor, lambda: logged("instruction: 'wave'"), 30), proc.output()
        best_effort = node.create_publisher(String, TOPIC, BEST_EFFORT)
        best_effort.publish(String(data="never read"))
        assert spin_until(executor, lambda: logged(f"a publisher on {TOPIC} offers incompatible QoS"), 30), proc.output()
        # the first control tick finds no camera image yet: one info line, no warning
        assert spin_until(executor, lambda: logged("waiting for the first inputs"), 30), proc.output()
        assert proc.running, proc.output()
        assert proc.stop(executor=executor) == 0
        log = proc.output()
    finally:
        proc.close()
        executor.shutdown()
        node.destroy_node()
    assert "never read" not in log and "~/instruction" not in log
    assert "offering incompatible QoS" not in log  # rclpy's own warning: the latched reader refusing the volatile writer
    # No camera publishes here: the start-up grace keeps the missing image to one info line.
    assert "waiting for the first inputs" in log and "no action chunk this tick" not in log, log
