"""The instruction topic over real DDS: a latched publisher that published before the node started still reaches
it, a plain volatile publisher (as `ros2 topic pub`) reaches it too and is never told that the node requests an
incompatible QoS (whether it starts before or after the node), and an incompatible one is named in a warning
with its resolved topic. The start without inputs is quiet: one info line, no per-tick warnings."""

from __future__ import annotations

from pathlib import Path

import pytest
import rclpy
from rclpy.event_handler import PublisherEventCallbacks
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


def _volatile_publisher(node, told: list[str]):  # noqa: ANN001, ANN202
    """A volatile publisher that records what rclpy would warn it about (a subscription requesting incompatible
    QoS) instead of logging it."""
    events = PublisherEventCallbacks(incompatible_qos=lambda event: told.append(str(event.last_policy_kind)))
    return node.create_publisher(String, TOPIC, VOLATILE, event_callbacks=events)


def _readers_all_volatile(node) -> bool:  # noqa: ANN001
    infos = node.get_subscriptions_info_by_topic(TOPIC)
    return bool(infos) and all(i.qos_profile.durability == DurabilityPolicy.VOLATILE for i in infos)


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
        # The reader of the latched history goes once it delivered: only the volatile reader stays.
        assert spin_until(executor, lambda: _readers_all_volatile(node), 10), node.get_subscriptions_info_by_topic(TOPIC)
        told: list[str] = []
        volatile = _volatile_publisher(node, told)
        assert wait_for_match(executor, [volatile], timeout=30), proc.output()
        volatile.publish(String(data="wave"))
        assert spin_until(executor, lambda: logged("instruction: 'wave'"), 30), proc.output()
        latched.publish(String(data="point"))  # a latched publisher is heard live as well
        assert spin_until(executor, lambda: logged("instruction: 'point'"), 30), proc.output()
        assert told == []
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


def test_a_volatile_publisher_started_first_is_never_told_of_an_incompatible_reader(ros_context, tmp_path: Path) -> None:  # noqa: ANN001
    node, executor = make_test_node("instruction_qos_first")
    told: list[str] = []
    volatile = _volatile_publisher(node, told)
    latched = node.create_publisher(String, TOPIC, LATCHED)
    latched.publish(String(data="stack the blocks"))
    params = write_params(tmp_path / "params.yaml", {"default_instruction": ""})
    proc = NodeProcess([REPO / "config" / "demo.yaml", params]).start()
    try:
        assert wait_for_match(executor, [volatile, latched], timeout=60) and proc.running, proc.output()
        volatile.publish(String(data="wave"))
        assert spin_until(executor, lambda: "instruction: 'wave'" in proc.output() or not proc.running, 30), proc.output()
        spin_until(executor, lambda: not proc.running, 2 * 2.0)  # the history reader's longest life, twice
        assert proc.running and told == [], (told, proc.output())
        assert _readers_all_volatile(node)
        assert proc.stop(executor=executor) == 0
    finally:
        proc.close()
        executor.shutdown()
        node.destroy_node()
