"""A clock that jumps, over real DDS: `oxygen_node` (config/demo.yaml, the tiny model) in its own process with
`use_sim_time`, driven by this test's `/clock` (100 Hz) and sensors stamped with it. The clock runs, jumps
back 30 s, runs, jumps back 22 ms (what a preempted clock reading once passed for), runs, jumps back 30 s again,
runs, jumps forward 60 s and runs: after every jump chunks come within
two control periods, on every output, for every robot; /diagnostics raise no ERROR, count the jumps, and
their achieved rate matches what a subscriber computes from the same chunks' stamps; the node logs one info
line per jump. Both replan modes, one robot and two, every output kind (joint_trajectory, float64_array,
twist).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import TwistStamped
from oxygen_ros_msgs.msg import ActionChunk, TextDelta
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.interface.convert import array_to_image, ns_to_stamp, stamp_to_ns

from ros_helpers import REPO, Collector, NodeProcess, make_test_node, spin_for, spin_until, wait_for_match, write_params

NS = 1_000_000_000
RELIABLE = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
JOINTS = [f"panda_joint{i}" for i in range(1, 8)]
CONTROL_PERIOD_S = 0.2  # config/demo.yaml: 5 Hz
RUN_S = 3.0  # sim seconds between jumps
JUMPS_S = (-30.0, -0.022, -30.0, 60.0)
START_NS = 1000 * NS
JUMP_SETTLE_S = 0.3  # a diagnostics report received this soon after a jump was sent may be of the timeline before

# (replan mode, robots, outputs): every output kind, one robot and two, both replan modes.
CASES = {
    "tick-one-robot-trajectory-and-velocity-array": ("tick", [], {
        "output_types": ["joint_trajectory", "float64_array"], "output_names": ["arm", "gripper"],
        "output_topics": ["joint_trajectory_controller/joint_trajectory", "gripper_controller/commands"],
        "output_dims": ["0..6", "7"], "output_joints": [",".join(JOINTS), "panda_finger_joint1"],
        "output_interfaces": ["position", "velocity"]}),
    "n_action_steps-two-robots-twist-and-trajectory": ("n_action_steps", ["arm1", "arm2"], {
        "output_types": ["twist", "joint_trajectory"], "output_names": ["eef", "wrist"],
        "output_topics": ["servo_node/delta_twist_cmds", "joint_trajectory_controller/joint_trajectory"],
        "output_dims": ["0..5", "6..7"], "output_joints": ["", "panda_joint7,panda_finger_joint1"],
        "output_frames": ["panda_hand", ""]}),
}
OUTPUT_TYPES = {"joint_trajectory": JointTrajectory, "float64_array": Float64MultiArray, "twist": TwistStamped}


@dataclass
class RobotIO:
    prefix: str  # "" or "/arm1"
    cams: list[Any]
    joints: Any
    chunks: Collector
    outputs: dict[str, Collector] = field(default_factory=dict)


def _values(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def _subscriber_rate(stamps: list[int], now_ns: int, window_ns: int) -> tuple[int, float]:
    """Chunks with stamps in (now - window, now] and their rate from their stamps, as a subscriber counts."""
    inside = sorted(s for s in stamps if now_ns - window_ns < s <= now_ns)
    if len(inside) < 2 or inside[-1] == inside[0]:
        return len(inside), 0.0
    return len(inside), (len(inside) - 1) * NS / (inside[-1] - inside[0])


@pytest.fixture(scope="module")
def ros_context():
    rclpy.init()
    yield
    rclpy.shutdown()


@pytest.mark.parametrize("case", list(CASES))
def test_chunks_resume_after_every_jump_without_false_alarms(ros_context, tmp_path: Path, case: str) -> None:  # noqa: ANN001
    replan, robots, outputs = CASES[case]
    params = write_params(tmp_path / "params.yaml", {
        "use_sim_time": True, "replan": replan, "n_action_steps": 2, "robots": robots, "diagnostics_period_s": 0.5,
        "max_observation_age_s": 0.7, "camera_widths": [32, 0, 32], "camera_heights": [32, 0, 32],
        "limit_out_of_range_margin": 100.0, **outputs})  # a random model: clamped, never refused  # fmt: skip
    node, executor = make_test_node(f"clock_jump_driver_{replan}")
    prefixes = [f"/{r}" for r in robots] or [""]
    ios = []
    for p in prefixes:
        io = RobotIO(p, [node.create_publisher(Image, f"{p}/camera/{c}/image_raw", qos_profile_sensor_data) for c in ("base", "wrist")],
                     node.create_publisher(JointState, f"{p}/joint_states", qos_profile_sensor_data),
                     Collector(node, ActionChunk, f"{p}/oxygen_node/action_chunk", RELIABLE))  # fmt: skip
        for kind, topic in zip(outputs["output_types"], outputs["output_topics"]):
            io.outputs[kind] = Collector(node, OUTPUT_TYPES[kind], f"{p}/{topic}", RELIABLE)
        ios.append(io)
    clock_pub = node.create_publisher(Clock, "/clock", 10)
    diagnostics = Collector(node, DiagnosticArray, "/diagnostics", RELIABLE)
    deltas = Collector(node, TextDelta, f"{prefixes[0]}/oxygen_node/text/language", RELIABLE)
    sim = {"ns": START_NS, "steps": 0}
    image = np.full((32, 32, 3), 90, np.uint8)

    def step() -> None:  # 10 ms of sim time: /clock every step, joints every 2nd, images every 10th
        sim["ns"] += NS // 100
        sim["steps"] += 1
        clock_pub.publish(Clock(clock=ns_to_stamp(sim["ns"])))
        for io in ios:
            if sim["steps"] % 2 == 0:
                msg = JointState(name=[*JOINTS, "panda_finger_joint1"], position=[0.1] * 8)
                msg.header.stamp = ns_to_stamp(sim["ns"])
                io.joints.publish(msg)
            if sim["steps"] % 10 == 0:
                for cam in io.cams:
                    cam.publish(array_to_image(image, "rgb8", stamp=sim["ns"]))

    def run_until(predicate: Any, timeout: float) -> bool:
        return spin_until(executor, predicate, timeout, every=(0.01, step))

    proc = NodeProcess([REPO / "config" / "demo.yaml", params]).start()
    try:
        endpoints = [clock_pub, *[io.chunks.subscription for io in ios], *[c for io in ios for c in io.cams]]
        assert wait_for_match(executor, endpoints, timeout=90) and proc.running, proc.output()[-3000:]
        assert run_until(lambda: all(len(io.chunks) >= 3 for io in ios) or not proc.running, 90), proc.output()[-3000:]
        first_chunk_received = time.monotonic()
        resumed_s: list[float] = []  # sim time from each jump to the first chunk after it (every robot)
        jumps_sent: list[float] = []  # time.monotonic() when each jump's /clock was published
        for jump_s in (None, *JUMPS_S):
            if jump_s is not None:
                sim["ns"] += int(jump_s * NS) - NS // 100  # the next /clock is the last one plus the jump
                jumped_ns, counts = sim["ns"] + NS // 100, [len(io.chunks) for io in ios]
                jumps_sent.append(time.monotonic())

                def new_timeline(io: RobotIO, n: int) -> list[ActionChunk]:
                    return [c for c in io.chunks.messages[n:] if jumped_ns <= stamp_to_ns(c.header.stamp) <= sim["ns"]]

                assert run_until(lambda: all(new_timeline(io, n) for io, n in zip(ios, counts)), 20), proc.output()[-3000:]
                resumed_s.append((sim["ns"] - jumped_ns) / NS)
                for io, n in zip(ios, counts):  # at most the chunk in flight when the node saw the jump is older
                    assert len(io.chunks.messages[n:]) - len(new_timeline(io, n)) <= 1, io.prefix
            until = sim["ns"] + int(RUN_S * NS)
            assert run_until(lambda: sim["ns"] >= until, RUN_S * 10)
        spin_for(executor, 0.5)  # the last chunks and diagnostics in flight
        assert proc.stop(executor=executor) == 0
        log = proc.output()
    finally:
        proc.close()
        executor.shutdown()
        node.destroy_node()

    print(f"{case}: first chunk after each jump {resumed_s} s of sim time")
    assert all(t <= 2 * CONTROL_PERIOD_S for t in resumed_s), (resumed_s, log[-3000:])
    # One info line per jump, naming it and what was restarted.
    lines = [line for line in log.splitlines() if "clock jumped" in line and "restarted the timing" in line]
    assert len(lines) == len(JUMPS_S), log[-4000:]
    assert [("back" in line, "forward" in line) for line in lines] == [(j < 0, j > 0) for j in JUMPS_S]
    # (the node may miss a /clock message or two: it names the jump between the times it saw)
    sizes = [float(re.search(r"jumped (?:back|forward) ([0-9.]+) s", line).group(1)) for line in lines]  # type: ignore[union-attr]
    assert sizes == pytest.approx([abs(j) for j in JUMPS_S], abs=0.1), lines
    if robots:
        assert all("of robots arm1, arm2" in line and "tick schedule" in line for line in lines)
    alarms = [line for line in log.splitlines() if ("[WARN]" in line or "[ERROR]" in line)
              and "no limits for" not in line and "clamped into a range" not in line]  # a random model's clamped positions
    assert not alarms, alarms
    # Every output kept going after the last jump.
    for io in ios:
        for kind, collector in io.outputs.items():
            assert len(collector) > 0, (io.prefix, kind)
        last_jump = stamp_to_ns(io.chunks.messages[-1].header.stamp) - int(RUN_S * NS)
        assert sum(stamp_to_ns(c.header.stamp) >= last_jump for c in io.chunks.messages) >= 3, io.prefix

    target = 1 / CONTROL_PERIOD_S if replan == "tick" else 1 / (2 * CONTROL_PERIOD_S)
    reports = [(m, t) for m, t in zip(diagnostics.messages, diagnostics.times) if t >= first_chunk_received]
    compared = total = 0
    pairs: list[tuple[float, float]] = []  # (reported, a subscriber's) rate
    for msg, received in reports:
        # The node's windows start again at a jump: so do the subscriber's (a 22 ms jump leaves the chunks before it
        # within the window). A report made around a jump may be of either timeline: not compared.
        since = max((j for j in jumps_sent if j < received), default=0.0)
        if since and received - since < JUMP_SETTLE_S:
            continue
        now_ns = stamp_to_ns(msg.header.stamp)
        for status in msg.status:
            assert status.level != DiagnosticStatus.ERROR, (status.name, status.message)
            if not status.name.endswith(": control"):
                continue
            values = _values(status)
            io = next(io for io in ios if status.name == f"oxygen_ros{': ' + io.prefix[1:] if io.prefix else ''}: control")
            window_ns = int(float(values["rate_window_s"]) * NS)
            # the chunks the node had published when it reported: those received before the report
            stamps = [stamp_to_ns(c.header.stamp) for c, t in zip(io.chunks.messages, io.chunks.times) if since < t <= received]
            n, rate = _subscriber_rate(stamps, now_ns, window_ns)
            reported = int(values["chunks_in_window"])
            # +-1: a chunk on its way when the report was sent, or published between taking and sending the report
            assert abs(reported - n) <= 1, (values, n)
            if n == reported and n >= 2:  # the same chunks: the same rate
                assert float(values["achieved_rate_hz"]) == pytest.approx(rate, abs=1e-3), (values, n, rate)
                compared += 1
                pairs.append((float(values["achieved_rate_hz"]), round(rate, 3)))
            if n >= 8:
                assert rate >= 0.5 * target, (rate, target)  # (a busy machine may lose a tick: the report says so)
            total += 1
        last = _values(next(s for s in msg.status if s.name.endswith(": control")))
    print(f"{case}: {compared} of {total} reports on the same chunks as the subscriber; (reported, subscriber's) rate: "
          f"{sorted(set(pairs))}")
    assert compared >= 10 and compared >= 0.6 * total, (compared, total)
    assert (last["clock_jumps_back"], last["clock_jumps_forward"]) == ("3", "1") and "forward 6" in last["last_clock_jump"]
    # The peak of live text requests within a window is at least what a subscriber of the deltas saw live at once
    # (over the run after the last jump: one timeline).
    final = [m for m, _ in reports if stamp_to_ns(m.header.stamp) >= jumped_ns + NS]  # a tick with text in every window
    text = [_values(s) for m in final for s in m.status if s.name.endswith(": text")]
    kv = [_values(s) for m in final for s in m.status if s.name.endswith(": kv")]
    seen = _most_live_at_once([d for d in deltas.messages if stamp_to_ns(d.header.stamp) >= jumped_ns])
    assert max(int(t["live_requests_peak"]) for t in text) >= seen >= 1, (seen, text)
    assert min(int(k["kv_peak_bytes"]) for k in kv) > 0 and max(int(t["live_requests_peak"]) for t in text) >= 1


def _most_live_at_once(deltas: list[TextDelta]) -> int:
    """The most requests seen live at once: each from its first delta's stamp to its final delta's stamp."""
    spans: dict[int, list[int]] = {}
    for d in deltas:
        t = stamp_to_ns(d.header.stamp)
        span = spans.setdefault(d.request_id, [t, t])
        span[0], span[1] = min(span[0], t), max(span[1], t)
    edges = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()], key=lambda e: (e[0], -e[1]))
    live = most = 0
    for _, change in edges:
        live += change
        most = max(most, live)
    return most
