"""Stopping the nodes as supervisors do: SIGTERM exits as cleanly as SIGINT, and `--exit-with-parent` (what the
launch files pass) stops a node cleanly when its launcher dies without stopping it, as `ros2 launch` does under
SIGTERM. Real processes, real DDS (loopback only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from rclpy.qos import QoSProfile, ReliabilityPolicy
from diagnostic_msgs.msg import DiagnosticArray

from ros_helpers import REPO, Collector, NodeProcess, ros_env, spin_until

DEMO = REPO / "config" / "demo.yaml"  # the tiny random-weight model: quick to load
RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)

# A launcher that dies without stopping its child, as `ros2 launch` does under SIGTERM ("using SIGTERM can result in
# orphaned processes"): it starts the node, says its pid, and ends on the default SIGTERM action.
LAUNCHER = """
import subprocess, sys, time
log = open(sys.argv[1], "wb")
child = subprocess.Popen(sys.argv[2:], stdout=log, stderr=subprocess.STDOUT)
print(child.pid, flush=True)
time.sleep(3600)
"""


def _gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaped yet counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _spinning(executor: Any, diagnostics: Collector, output: Callable[[], str]) -> None:
    """Wait until the node's executor spins (its first /diagnostics): its stop handling is in place by then."""
    assert spin_until(executor, lambda: len(diagnostics) > 0, timeout=90), output()


def test_sigterm_stops_the_node_as_cleanly_as_sigint(ros) -> None:  # noqa: ANN001
    node, executor = ros
    diagnostics = Collector(node, DiagnosticArray, "/diagnostics", RELIABLE)
    with NodeProcess([DEMO], ros_args=["-r", "__ns:=/sigterm"]) as proc:
        _spinning(executor, diagnostics, proc.output)
        code = proc.stop(timeout=30, sig=signal.SIGTERM, executor=executor)
        out = proc.output()
    assert code == 0 and "Traceback" not in out and "stopped (" in out, out[-3000:]


@pytest.mark.parametrize("exit_with_parent", [True, False], ids=["exit-with-parent", "without"])
def test_a_node_whose_launcher_dies_stops_cleanly_with_exit_with_parent(ros, tmp_path, exit_with_parent: bool) -> None:  # noqa: ANN001
    node, executor = ros
    ns = f"/orphan_{int(exit_with_parent)}"
    diagnostics = Collector(node, DiagnosticArray, "/diagnostics", RELIABLE)
    log = tmp_path / "node.log"
    flags = ["--exit-with-parent"] if exit_with_parent else []
    command = [sys.executable, "-m", "oxygen_ros.ros.main", *flags, "--params-file", str(DEMO), "--ros-args", "-r", f"__ns:={ns}"]
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(log), *command], stdout=subprocess.PIPE,
                                env=ros_env(), cwd=REPO, start_new_session=True)  # fmt: skip
    pid = int(launcher.stdout.readline())  # type: ignore[union-attr]
    try:
        _spinning(executor, diagnostics, log.read_text)
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=10) == -signal.SIGTERM  # the launcher died; its child was not told
        stopped = spin_until(executor, lambda: _gone(pid), timeout=30 if exit_with_parent else 3)
        out = log.read_text()
        if exit_with_parent:
            assert stopped and "stopped (" in out and "Traceback" not in out, out[-3000:]
        else:
            assert not stopped and "stopped (" not in out  # what the option is for: an orphan that runs on
    finally:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    deadline = time.monotonic() + 5
    while not _gone(pid) and time.monotonic() < deadline:  # the kill above lands
        time.sleep(0.05)
