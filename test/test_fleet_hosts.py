"""Robots on another host: two network namespaces joined only by a veth pair (nothing else connected), discovery
kept at LOCALHOST with ROS_STATIC_PEERS naming the other namespace's address, as docs/ros.md describes: a probe
topic crosses only with the static peer, and two simulated arms in one namespace are driven by one oxygen_node
in the other, with 20 ms added each way. Needs root and iproute2; skipped elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ros_helpers import REPO, NodeProcess, write_params

PROBE = Path(__file__).with_name("fleet_probe.py")
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def two_hosts() -> Iterator[tuple[str, str]]:
    """Namespaces robot (10.77.0.1) and inference (10.77.0.2), joined by one veth pair; removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    robot, infer = f"oxr{tag}", f"oxi{tag}"
    ip("netns", "add", robot)
    try:
        ip("netns", "add", infer)
        try:
            ip("link", "add", f"vr{tag}", "netns", robot, "type", "veth", "peer", "name", f"vi{tag}", "netns", infer)
            for ns, dev, addr in ((robot, f"vr{tag}", "10.77.0.1/24"), (infer, f"vi{tag}", "10.77.0.2/24")):
                ip("-n", ns, "addr", "add", addr, "dev", dev)
                ip("-n", ns, "link", "set", "lo", "up")
                ip("-n", ns, "link", "set", dev, "up")
            yield robot, infer
        finally:
            ip("netns", "del", infer)
    finally:
        ip("netns", "del", robot)


def probe(ns: str, role: str, seconds: float, peer: str | None) -> subprocess.Popen:
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    env.pop("ROS_STATIC_PEERS", None)
    if peer:
        env["ROS_STATIC_PEERS"] = peer
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, str(PROBE), role, str(seconds)], env=env,
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("static_peers", [True, False])
def test_topics_cross_the_veth_only_with_static_peers(two_hosts: tuple[str, str], static_peers: bool) -> None:
    robot, infer = two_hosts
    seconds = 40.0 if static_peers else 8.0
    pub = probe(robot, "pub", seconds, "10.77.0.2" if static_peers else None)
    sub = probe(infer, "sub", seconds, "10.77.0.1" if static_peers else None)
    out, _ = sub.communicate(timeout=seconds + 60)
    pub.kill()
    pub.wait()
    assert out.strip() == ("received" if static_peers else "nothing")


def in_namespace(ns: str, process: NodeProcess) -> NodeProcess:
    """The node process started inside network namespace ``ns``."""
    process.args = ["ip", "netns", "exec", ns, *process.args]
    return process


def test_two_arms_on_another_host_are_driven_by_one_node_with_20_ms_each_way(two_hosts: tuple[str, str], tmp_path) -> None:  # noqa: ANN001
    """The fleet deployment: the simulated arms (robot namespace) publish to one inference node (the other), each
    observation and each command delayed 20 ms; with time alignment on (the default) both arms keep succeeding."""
    robot, infer = two_hosts
    arms = ("arm1", "arm2")
    policy = in_namespace(infer, NodeProcess([REPO / "config" / "demo_policy.yaml"], ros_args=["-p", "robots:=[arm1,arm2]"],
                                             ROS_STATIC_PEERS="10.77.0.1"))  # fmt: skip
    sims = []
    for i, arm in enumerate(arms):
        params = write_params(tmp_path / f"{arm}.yaml", {"episodes": 2, "seed": 40 + 2 * i, "transport_delay_s": 0.02,
                                                          "wait_for_commander_s": 90.0})  # fmt: skip
        sims.append(in_namespace(robot, NodeProcess([REPO / "config" / "demo_sim.yaml", params], ros_args=["-r", f"__ns:=/{arm}"],
                                                    module="oxygen_ros.ros.sim_main", ROS_STATIC_PEERS="10.77.0.2")))  # fmt: skip
    with policy:
        for sim in sims:
            sim.start()
        try:
            codes = [sim.wait(180.0) for sim in sims]
            logs = [sim.output() for sim in sims]
            assert codes == [0, 0], "\n".join(logs) + policy.output()
        finally:
            for sim in sims:
                sim.close()
    succeeded = 0
    for arm, log in zip(arms, logs):
        done = [line for line in log.splitlines() if "all 2 episodes done" in line]
        assert done, (arm, log)
        succeeded += int(done[-1].rsplit(":", 1)[1].split()[0])
    assert succeeded >= 3, logs  # the demo policy succeeds in about 97 % of held-out scenes on one host
