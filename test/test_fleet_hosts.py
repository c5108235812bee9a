"""Robots on another host: two network namespaces joined only by a veth pair (nothing else connected), discovery
kept at LOCALHOST with ROS_STATIC_PEERS naming the other namespace's address, as docs/wiring.md describes: a probe
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
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root (a network namespace per host) and iproute2 (apt install iproute2)")


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


# A probe pair started with static peers on both sides found each other within about 2 s in 18 of 21 tries on a
# 2-core AMD EPYC (2026-12-02) and not at all within 30-40 s in the other 3. A probe alone in a fresh namespace
# binds participant id 0's ports, well inside the 32 that rmw_fastrtps probes at a static peer, and a private
# /dev/shm and machine id per namespace did not change the rate; the cause is not known. The crossing is
# therefore tried twice: a second miss fails the test.
CROSSING_TRIES = 2


@pytest.mark.parametrize("static_peers", [True, False])
def test_topics_cross_the_veth_only_with_static_peers(two_hosts: tuple[str, str], static_peers: bool) -> None:
    robot, infer = two_hosts
    seconds = 30.0 if static_peers else 8.0
    outcomes = []
    for _ in range(CROSSING_TRIES if static_peers else 1):
        pub = probe(robot, "pub", seconds, "10.77.0.2" if static_peers else None)
        sub = probe(infer, "sub", seconds, "10.77.0.1" if static_peers else None)
        out, _ = sub.communicate(timeout=seconds + 60)
        pub.kill()
        pub.wait()
        outcomes.append(out.strip())
        if outcomes[-1] == "received":
            break
    assert outcomes[-1] == ("received" if static_peers else "nothing"), outcomes


def in_namespace(ns: str, process: NodeProcess) -> NodeProcess:
    """The node process started inside network namespace ``ns``."""
    process.args = ["ip", "netns", "exec", ns, *process.args]
    return process


def test_two_arms_on_another_host_are_driven_by_one_node_with_20_ms_each_way(two_hosts: tuple[str, str], tmp_path) -> None:  # noqa: ANN001
    """The fleet deployment: the simulated arms (robot namespace) publish to one inference node (the other), each
    observation and each command delayed 20 ms; with time alignment on (the default) both arms keep succeeding."""
    robot, infer = two_hosts
    arms = ("arm1", "arm2")
    sim_params = [write_params(tmp_path / f"{arm}.yaml", {"episodes": 2, "seed": 40 + 2 * i, "transport_delay_s": 0.02,
                                                         "wait_for_commander_s": 90.0})  # fmt: skip
                  for i, arm in enumerate(arms)]

    def processes() -> tuple[NodeProcess, list[NodeProcess]]:
        policy = in_namespace(infer, NodeProcess([REPO / "config" / "demo_policy.yaml"], ros_args=["-p", "robots:=[arm1,arm2]"],
                                                 ROS_STATIC_PEERS="10.77.0.1"))  # fmt: skip
        sims = [in_namespace(robot, NodeProcess([REPO / "config" / "demo_sim.yaml", params], ros_args=["-r", f"__ns:=/{arm}"],
                                                module="oxygen_ros.sim_ros.main", ROS_STATIC_PEERS="10.77.0.2"))  # fmt: skip
                for arm, params in zip(arms, sim_params)]
        return policy, sims

    for _ in range(CROSSING_TRIES):
        codes, logs, policy_log = _run_closed_loop(*processes())
        if codes == [0, 0]:
            break
    assert codes == [0, 0], "\n".join(logs) + policy_log
    succeeded = 0
    for arm, log in zip(arms, logs):
        done = [line for line in log.splitlines() if "all 2 episodes done" in line]
        assert done, (arm, log)
        succeeded += int(done[-1].rsplit(":", 1)[1].split()[0])
    assert succeeded >= 3, logs  # the demo policy succeeds in about 97 % of held-out scenes on one host


def _run_closed_loop(policy: NodeProcess, sims: list[NodeProcess]) -> tuple[list[int | None], list[str], str]:
    """Start the policy and the simulators, wait for the simulators to finish; (exit codes, their logs, the policy's)."""
    with policy:
        try:
            for sim in sims:
                sim.start()
            codes = [sim.wait(180.0) for sim in sims]
            return codes, [sim.output() for sim in sims], policy.output()
        finally:
            for sim in sims:
                sim.close()
