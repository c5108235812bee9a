"""The managed (lifecycle) node in its own process, driven over real DDS through ~/change_state and
~/get_state as `ros2 lifecycle set` does: a configure that fails on a bad checkpoint leaves it unconfigured
and alive with the reason; fixing the parameter and configuring again works; activate makes chunks and text
flow; deactivate ends the live text with final deltas; cleanup releases the model; SIGINT exits cleanly."""

from __future__ import annotations

import time
from typing import Any

import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticStatus
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient

from ros_helpers import REPO, NodeProcess, make_test_node, spin_until, write_params
from test_node import TEST_OVERRIDES, Robot, _requests

NAMESPACE = "/managed"
NODE = f"{NAMESPACE}/oxygen_node"


@pytest.fixture(scope="module")
def ros_context():
    rclpy.init()
    yield
    rclpy.shutdown()


class Lifecycle:
    """A client of a managed node's lifecycle services."""

    def __init__(self, node: Any, executor: Any, name: str, proc: NodeProcess) -> None:
        self.executor, self.proc = executor, proc
        self.change = node.create_client(ChangeState, f"{name}/change_state")
        self.get = node.create_client(GetState, f"{name}/get_state")

    def ready(self, timeout: float) -> bool:
        return spin_until(self.executor, lambda: self.change.service_is_ready() and self.get.service_is_ready(), timeout)

    def _call(self, client: Any, request: Any, timeout: float) -> Any:
        future = client.call_async(request)
        assert spin_until(self.executor, future.done, timeout), f"no answer from {client.srv_name}\n{self.proc.output()[-3000:]}"
        return future.result()

    def state(self) -> str:
        return self._call(self.get, GetState.Request(), 30).current_state.label

    def set(self, transition_id: int, timeout: float = 90) -> bool:
        return self._call(self.change, ChangeState.Request(transition=Transition(id=transition_id)), timeout).success


def _status(robot: Robot, after: float, name: str = "node") -> DiagnosticStatus | None:
    """The latest `oxygen_ros: <name>` status received after `after` (time.monotonic)."""
    for msg in reversed(robot.diagnostics.since(after)):
        for status in msg.status:
            if status.name == f"oxygen_ros: {name}":
                return status
    return None


def _values(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def test_managed_node_transitions_over_dds(ros_context, tmp_path):
    node, executor = make_test_node("lifecycle_driver")
    robot = Robot(node, executor, namespace=NAMESPACE)
    missing = tmp_path / "no_such_checkpoint"
    params = write_params(tmp_path / "managed.yaml", {
        **TEST_OVERRIDES, "checkpoint": str(missing), "tokens_per_frame": 1, "task_max_tokens": [40, 40],
    })
    proc = NodeProcess([REPO / "config" / "demo.yaml", params], ros_args=["-r", f"__ns:={NAMESPACE}"], flags=["--lifecycle"])
    lifecycle = Lifecycle(node, executor, NODE, proc)
    try:
        proc.start()
        assert lifecycle.ready(timeout=60), proc.output()
        assert lifecycle.state() == "unconfigured"

        # A checkpoint that does not exist: configure fails, the node stays unconfigured (and alive) with why.
        t0 = time.monotonic()
        assert not lifecycle.set(Transition.TRANSITION_CONFIGURE)
        assert lifecycle.state() == "unconfigured" and proc.running
        assert spin_until(executor, lambda: _status(robot, t0) is not None, timeout=10)
        status = _status(robot, t0)
        assert status.level == DiagnosticStatus.ERROR and str(missing) in status.message, status.message
        assert "configure failed" in proc.output() and str(missing) in proc.output()

        # Parameters fixed at start-up can be changed while unconfigured: fix it and configure again.
        client = AsyncParameterClient(node, NODE)
        assert spin_until(executor, client.services_are_ready, timeout=15)
        future = client.set_parameters([Parameter("checkpoint", value="")])
        assert spin_until(executor, future.done, timeout=10) and future.result().results[0].successful
        assert lifecycle.set(Transition.TRANSITION_CONFIGURE), proc.output()[-3000:]
        assert lifecycle.state() == "inactive"
        future = client.set_parameters([Parameter("horizon", value=5)])
        assert spin_until(executor, future.done, timeout=10)
        refused = future.result().results[0]
        assert not refused.successful and "fixed while the node is configured" in refused.reason

        # Inactive: no ticks. Active: chunks and text flow.
        robot.instruct("pick up the red cup")
        assert robot.spin_until(lambda: False, timeout=1.0) is False and len(robot.chunks) == 0
        assert lifecycle.set(Transition.TRANSITION_ACTIVATE)
        assert lifecycle.state() == "active"
        assert robot.spin_until(lambda: len(_requests(robot.deltas["language"].messages)) >= 2, timeout=60), (
            proc.output()[-3000:])

        # Deactivate: ticking stops and every live request ends with a final delta (cancelled); KV freed.
        assert lifecycle.set(Transition.TRANSITION_DEACTIVATE)
        assert lifecycle.state() == "inactive"
        assert spin_until(executor, lambda: all(
            parts[-1].final for c in robot.deltas.values() for parts in _requests(c.messages).values()), timeout=10)
        reasons = [d.finish_reason for c in robot.deltas.values() for d in c.messages if d.final]
        assert "cancelled" in reasons
        t1 = time.monotonic()
        assert spin_until(executor, lambda: _status(robot, t1, "kv") is not None, timeout=10)
        kv, text = _values(_status(robot, t1, "kv")), _values(_status(robot, t1, "text"))
        assert int(kv["kv_used_bytes"]) == 0 and int(kv["live_prefixes"]) == 0 and int(text["live_requests"]) == 0
        assert _status(robot, t1, "node").message.startswith("inactive")
        stopped = len(robot.chunks)
        robot.spin_until(lambda: False, timeout=1.0)
        assert len(robot.chunks) <= stopped + 1  # at most one chunk already in flight

        # Activate again (the runtime is reused), then cleanup releases everything.
        assert lifecycle.set(Transition.TRANSITION_ACTIVATE)
        resumed = len(robot.chunks)
        assert robot.spin_until(lambda: len(robot.chunks) >= resumed + 2, timeout=30)
        assert lifecycle.set(Transition.TRANSITION_DEACTIVATE)
        assert lifecycle.set(Transition.TRANSITION_CLEANUP)
        assert lifecycle.state() == "unconfigured" and proc.running
        assert "model released" in proc.output()

        # Configure once more, then the shutdown transition releases everything: finalized, still answering.
        assert lifecycle.set(Transition.TRANSITION_CONFIGURE)
        assert lifecycle.set(Transition.TRANSITION_INACTIVE_SHUTDOWN)
        assert lifecycle.state() == "finalized" and proc.running
        assert proc.output().count("model released") == 2

        code = proc.stop(timeout=30, executor=executor)
        out = proc.output()
        assert code == 0 and "Traceback" not in out, out[-3000:]
    finally:
        proc.close()
        executor.shutdown()
        node.destroy_node()


def test_autostart_configures_and_activates(ros_context, tmp_path):
    node, executor = make_test_node("autostart_driver")
    robot = Robot(node, executor, namespace="/auto")
    params = write_params(tmp_path / "auto.yaml", TEST_OVERRIDES)
    proc = NodeProcess([REPO / "config" / "demo.yaml", params], ros_args=["-r", "__ns:=/auto"],
                       flags=["--lifecycle", "--autostart"])
    lifecycle = Lifecycle(node, executor, "/auto/oxygen_node", proc)
    try:
        proc.start()
        assert lifecycle.ready(timeout=60), proc.output()
        robot.instruct("pick up the red cup")
        assert robot.spin_until(lambda: len(robot.chunks) >= 2, timeout=60), proc.output()[-3000:]
        assert lifecycle.state() == "active"
        code = proc.stop(timeout=30, executor=executor)
        assert code == 0 and "Traceback" not in proc.output(), proc.output()[-3000:]
    finally:
        proc.close()
        executor.shutdown()
        node.destroy_node()
