"""``oxygen-ctl`` against a real ``oxygen_node`` over DDS (loopback): stop and resume through ~/set_stop (the
node's safety status follows), status from the node's own /diagnostics, a question answered through ~/ask and
streamed, and a node that is not there named in one line."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from oxygen_ros.ros.ctl import keep_dds_local, node_path
from ros_helpers import REPO, ros_env
from test_ask import OVERRIDES, ask_robot


def ctl(robot: Any, *args: str, timeout: float = 90.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run oxygen-ctl while the driver keeps publishing the robot's sensors; its exit code, stdout and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "oxygen_ros.ros.ctl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or ros_env(), cwd=REPO)  # fmt: skip
    finished = robot.spin_until(lambda: proc.poll() is not None, timeout=timeout)
    if not finished:
        proc.kill()
    out, err = proc.communicate(timeout=10)
    assert finished, f"oxygen-ctl {' '.join(args)} did not end: {out}\n{err}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def safety_message(robot: Any, after: float) -> str:
    """The latest safety status message the node published after ``after`` (time.monotonic)."""
    for msg, t in zip(reversed(robot.diagnostics.messages), reversed(robot.diagnostics.times)):
        if t < after:
            break
        for status in msg.status:
            if status.name.endswith(": safety"):
                return status.message
    return ""


@pytest.fixture(scope="module")
def robot(tmp_path_factory):
    with ask_robot(tmp_path_factory.mktemp("ctl"), "ctl_driver", OVERRIDES) as robot:
        yield robot


def test_stop_status_and_resume(robot) -> None:  # noqa: ANN001
    done = ctl(robot, "stop")
    assert done.returncode == 0 and "stop set on /oxygen_node" in done.stdout, done.stderr
    t0 = time.monotonic()
    assert robot.spin_until(lambda: safety_message(robot, t0).startswith("STOP"), timeout=20), safety_message(robot, 0)
    status = ctl(robot, "status", "--values")
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0] == "/oxygen_node"
    assert any(line.split()[:2] == ["WARN", "oxygen_ros:"] and "STOP: stopped by the set_stop service" in line for line in lines), status.stdout
    assert any("oxygen_ros: node: active" in line for line in lines), status.stdout
    assert any(line.strip() == "state = STOP" for line in lines), status.stdout
    done = ctl(robot, "resume")
    assert done.returncode == 0 and "stop cleared on /oxygen_node: cleared" in done.stdout, done.stderr
    t1 = time.monotonic()
    assert robot.spin_until(lambda: safety_message(robot, t1).startswith(("RUN", "HOLD")), timeout=20)


def test_ask_streams_the_answer(robot) -> None:  # noqa: ANN001
    done = ctl(robot, "ask", "what is in the gripper?", "--max-tokens", "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("\n") and done.stdout.strip(), done.stdout
    assert done.stderr.strip().startswith("(") and "from frame" in done.stderr, done.stderr
    refused = ctl(robot, "ask", "   ")
    assert refused.returncode == 1 and "refused: the question is empty" in refused.stderr, refused.stderr


def test_a_node_that_is_not_there_is_named(robot) -> None:  # noqa: ANN001
    env = ros_env()
    env.pop("ROS_AUTOMATIC_DISCOVERY_RANGE")  # oxygen-ctl keeps DDS on the machine by itself
    for command in (["stop"], ["status"], ["ask", "hello?"]):
        done = ctl(robot, "--node", "/nobody_here", "--timeout", "3", *command, env=env)
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith("oxygen-ctl: no ") and "/nobody_here" in done.stderr, done.stderr


def test_names_and_environment() -> None:
    assert node_path("/oxygen_node", "", "set_stop") == "/oxygen_node/set_stop"
    assert node_path("arm/oxygen_node", "", "ask") == "/arm/oxygen_node/ask"
    assert node_path("/oxygen_node", "left", "ask") == "/left/oxygen_node/ask"  # as the node names a robot's ~/ask
    env: dict[str, str] = {}
    keep_dds_local(env)
    assert env == {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    env = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"}
    keep_dds_local(env)
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"  # a choice made in the environment stands
