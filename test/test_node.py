"""The ROS node: input store, trajectory and diagnostics logic, use_sim_time in-process, and the real node
in its own process over DDS on loopback (chunks, trajectories, text streams, bad inputs, parameters,
SIGINT, a checkpoint that fails to load).

The process tests share one `oxygen_node` (module fixture) started with config/demo.yaml plus a small
override file; they run in file order and the SIGINT test, which stops it, comes last.
"""

from __future__ import annotations

import io
import math
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from oxygen_ros_msgs.msg import ActionChunk, TextDelta
from rcl_interfaces.msg import ParameterType
from rclpy.parameter import Parameter, parameter_value_to_python
from rclpy.parameter_client import AsyncParameterClient
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.interface.convert import array_to_image, ns_to_stamp, stamp_to_ns
from oxygen_ros.ros.diagnostics import Diagnostics
from oxygen_ros.interface.inputs import InputStore, ObservationError
from oxygen_ros.interface import params as P
from oxygen_ros.ros.latched_topic import HISTORY_QOS as LATCHED
from oxygen_ros.ros.node import OxygenNode
from oxygen_ros.interface.outputs import JointLimits, trajectory_msg

from ros_helpers import REPO, Collector, FakeRuntime, NodeProcess, make_test_node, spin_for, spin_until, wait_for_match, write_params

NS = 1_000_000_000
JOINTS = [f"panda_joint{i}" for i in range(1, 8)]
LOWER = [-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973]
UPPER = [2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973]
RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)


# ===================================================================================== input store
def _store(optional=(False, True, True), sizes=((0, 0), (0, 0), (0, 0)), use_state=True) -> InputStore:
    return InputStore(["/base", "", "/wrist"], list(optional), list(sizes), use_state, max_instruction_chars=20)


def _img(h=4, w=6) -> np.ndarray:
    return np.zeros((h, w, 3), dtype=np.uint8)


def test_store_builds_an_observation_with_masked_slots():
    s = _store()
    s.put_image(0, _img(), stamp_ns=10 * NS, recv_ns=10 * NS)
    s.put_joint_state(np.arange(7), stamp_ns=10 * NS, recv_ns=10 * NS)
    s.put_instruction("  pick  ", recv_ns=10 * NS)
    obs = s.snapshot(10 * NS + NS // 10, max_age_ns=NS // 2)
    assert obs.images[1] is None and obs.images[2] is None and obs.images[0].shape == (4, 6, 3)
    assert obs.stamp_ns == 10 * NS and obs.instruction == "pick" and obs.masked == [2]
    assert {k: v for k, v in s.counters().items() if v} == {"masked_slot": 1}


@pytest.mark.parametrize(
    "setup, kind",
    [
        (lambda s: None, "missing_image"),
        (lambda s: s.put_image(0, _img(), 1 * NS, 1 * NS), "stale_image"),
        (lambda s: s.put_image(0, _img(), 99 * NS, 10 * NS), "stale_image"),  # from the future is stale too
        (lambda s: s.reject_image(0, "bad encoding", 10 * NS, 10 * NS), "rejected_image"),
        (lambda s: s.put_image(0, _img(), 10 * NS, 10 * NS) or s.reject_joint_state("NaN", 10 * NS, 10 * NS),
         "rejected_joint_state"),
        (lambda s: s.put_image(0, _img(), 10 * NS, 10 * NS) or s.put_joint_state(np.zeros(7), 1 * NS, 1 * NS),
         "stale_joint_state"),
    ],
)
def test_store_refuses_to_build_from_bad_required_inputs(setup, kind):
    s = _store()
    s.put_joint_state(np.zeros(7), 10 * NS, 10 * NS)
    s.put_instruction("go", 10 * NS)
    setup(s)
    with pytest.raises(ObservationError) as err:
        s.snapshot(10 * NS, max_age_ns=NS // 2)
    assert err.value.kind == kind
    assert s.counters()[f"skipped_{kind}"] == 1


def test_store_instruction_rules_and_default():
    s = _store(use_state=False)
    s.put_image(0, _img(), 5 * NS, 5 * NS)
    with pytest.raises(ObservationError, match="default_instruction is empty"):
        s.snapshot(5 * NS, NS)
    assert s.snapshot(5 * NS, NS, default_instruction="wave").instruction == "wave"
    assert s.put_instruction("   ", 5 * NS) == "instruction is empty"
    with pytest.raises(ObservationError) as err:
        s.snapshot(5 * NS, NS, default_instruction="wave")  # a refused instruction is not replaced by the default
    assert err.value.kind == "rejected_instruction"
    assert "at most 20" in s.put_instruction("x" * 21, 5 * NS)
    assert s.put_instruction("stack the blocks", 5 * NS) is None
    assert s.snapshot(5 * NS, NS).instruction == "stack the blocks"
    assert s.counters()["rejected_instruction"] == 2


def test_store_checks_configured_image_sizes_and_uses_zero_stamps_as_receive_time():
    s = _store(sizes=((6, 4), (0, 0), (0, 0)), use_state=False)
    assert "image is 5x4, slot 0 expects 6x4" in s.put_image(0, _img(4, 5), 1, 1)
    assert s.put_image(0, _img(4, 6), stamp_ns=0, recv_ns=7 * NS) is None
    assert s.snapshot(7 * NS, NS, "go").stamp_ns == 0  # not stale: judged by its receive time


def test_all_optional_cameras_missing_is_no_observation():
    s = _store(optional=(True, True, True), use_state=False)
    with pytest.raises(ObservationError) as err:
        s.snapshot(NS, NS, "go")
    assert err.value.kind == "no_camera"


# ===================================================================================== trajectory
def test_trajectory_timing_names_and_clamping():
    actions = np.tile(np.linspace(-5, 5, 8, dtype=np.float32), (4, 1))
    msg, clamped = trajectory_msg(actions, JOINTS, 0.2, JointLimits(tuple(LOWER), tuple(UPPER)))
    assert msg.joint_names == JOINTS
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (0, 0)  # start now
    times = [stamp_to_ns(p.time_from_start) for p in msg.points]
    assert times == [200_000_000, 400_000_000, 600_000_000, 800_000_000]  # first point one period ahead
    positions = np.array([p.positions for p in msg.points])
    assert positions.shape == (4, 7)  # only the configured joints; the 8th action dim is not commanded
    assert np.all(positions >= np.array(LOWER) - 1e-9) and np.all(positions <= np.array(UPPER) + 1e-9)
    assert clamped == int(np.count_nonzero(np.clip(actions[:, :7], LOWER, UPPER) != actions[:, :7]))
    unclamped, n = trajectory_msg(actions, JOINTS, 0.2)
    assert n == 0 and unclamped.points[0].positions[0] == pytest.approx(-5.0)


@pytest.mark.parametrize(
    "actions, names, period, words",
    [
        (np.zeros((0, 8)), JOINTS, 0.1, "non-empty"),
        (np.zeros((3, 5)), JOINTS, 0.1, "cannot command 7 joints"),
        (np.full((3, 8), np.nan), JOINTS, 0.1, "NaN"),
        (np.zeros((3, 8)), JOINTS, 0.0, "step period"),
        (np.zeros((3, 8)), [], 0.1, "at least one joint"),
    ],
)
def test_trajectory_refuses_what_a_controller_must_not_get(actions, names, period, words):
    with pytest.raises(ValueError, match=words):
        trajectory_msg(actions, names, period)


# ==================================================================================== diagnostics
def _values(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def test_diagnostics_levels_follow_rate_inputs_and_silence():
    d = Diagnostics(target_rate_hz=10.0, window_s=1.0)
    control, inputs, text, kv = d.report(0, {})
    assert control.level == DiagnosticStatus.WARN and "no action chunk yet" in control.message
    t = 0
    for _ in range(11):  # 10 Hz for one second
        d.tick_started(t)
        d.chunk_published(t, work_s=0.01)
        t += NS // 10
    d.engine(FakeRuntime(_Config()).stats())
    control, inputs, text, kv = d.report(t - NS // 10, {"rejected_image": 0})
    assert control.level == DiagnosticStatus.OK, control.message
    assert float(_values(control)["achieved_rate_hz"]) == pytest.approx(10.0, rel=0.15)
    assert inputs.level == DiagnosticStatus.OK and kv.level == DiagnosticStatus.OK
    d.tick_skipped("stale_image: too old")
    control, inputs, _, _ = d.report(t + 2 * NS, {"rejected_image": 0, "skipped_stale_image": 3})
    assert control.level == DiagnosticStatus.ERROR and "stale_image" in control.message
    assert inputs.level == DiagnosticStatus.ERROR and _values(inputs)["skipped_ticks"] == "3"
    d.chunk_published(t + 2 * NS, work_s=0.5)  # longer than the 0.1 s period: a deadline miss
    control, inputs, _, _ = d.report(t + 2 * NS, {"rejected_image": 0, "skipped_stale_image": 3})
    assert control.level == DiagnosticStatus.WARN and _values(control)["deadline_misses"] == "1"
    assert inputs.level == DiagnosticStatus.OK  # nothing grew since the last report


@pytest.mark.parametrize("rate_hz, level", [(9.6, DiagnosticStatus.OK), (8.3, DiagnosticStatus.WARN)])  # 8.3 Hz of 10: under the 90 % WARN line
def test_diagnostics_warn_below_90_percent_of_the_target_rate(rate_hz, level):
    d = Diagnostics(target_rate_hz=10.0, window_s=2.0)
    t, period = 0, int(NS / rate_hz)
    while t <= 3 * NS:
        d.tick_started(t)
        d.chunk_published(t, work_s=0.01)
        t += period
    control = d.report(t - period, {})[0]
    assert control.level == level, (rate_hz, control.message)
    if level == DiagnosticStatus.WARN:
        assert "below target" in control.message


def test_topic_statistics_report_ages_per_input_and_chunk_latency():
    from oxygen_ros.ros.topic_stats import TopicStatistics

    stats = TopicStatistics(["cam/a", "", "cam/b"])
    status = stats.status()
    assert status.level == DiagnosticStatus.WARN and "cam/a" in status.message and "cam/b" in status.message
    for age in (0.1, 0.3):
        stats.record_ages({"cam/a": age, "cam/b": None})
    stats.record_ages({"cam/b": 0.05})
    stats.record_chunk_latency(0.2)
    values = _values(stats.status())
    assert float(values["input_age_s cam/a mean"]) == pytest.approx(0.2)
    assert float(values["input_age_s cam/a max"]) == pytest.approx(0.3)
    assert float(values["input_age_s cam/b last"]) == pytest.approx(0.05)
    assert float(values["chunk_latency_s last"]) == pytest.approx(0.2)


class _Config:
    horizon = 10
    dtype = "float32"


# ============================================================================ use_sim_time in-process
def test_use_sim_time_drives_ticks_stamps_and_staleness(ros_context):
    """Sim time far from the wall clock: chunks only come out if staleness, timers and stamps use it."""
    load = FakeRuntime.loader()
    node = OxygenNode("sim_time_oxygen", runtime_loader=load, parameter_overrides=[
        Parameter("use_sim_time", value=True),
        Parameter("camera_topics", value=["/sim/cam"]),
        Parameter("joint_names", value=JOINTS),
        Parameter("joint_state_topic", value="/sim/joint_states"),
        Parameter("default_instruction", value="go"),
        Parameter("control_rate_hz", value=5.0),
        Parameter("max_observation_age_s", value=0.3),
    ])
    driver, executor = make_test_node("sim_time_driver")
    executor.add_node(node)
    clock_pub = driver.create_publisher(Clock, "/clock", 10)
    cam = driver.create_publisher(Image, "/sim/cam", qos_profile_sensor_data)
    joints = driver.create_publisher(JointState, "/sim/joint_states", qos_profile_sensor_data)
    chunks = Collector(driver, ActionChunk, "/sim_time_oxygen/action_chunk", RELIABLE)
    assert wait_for_match(executor, [clock_pub, cam, joints, chunks.subscription])
    sim = {"ns": 1000 * NS}
    published: list[int] = []

    def step_sim() -> None:  # sim time runs 5x faster than the wall clock
        sim["ns"] += NS // 20
        clock_pub.publish(Clock(clock=ns_to_stamp(sim["ns"])))
        cam.publish(array_to_image(_img(8, 8), "rgb8", stamp=sim["ns"]))
        js = JointState(name=JOINTS, position=[0.0] * 7)
        js.header.stamp = ns_to_stamp(sim["ns"])
        joints.publish(js)
        published.append(sim["ns"])

    assert spin_until(executor, lambda: len(chunks) >= 6, timeout=20, every=(0.01, step_sim))
    stamps = [stamp_to_ns(c.header.stamp) for c in chunks.messages]
    assert set(stamps) <= set(published)  # the observation's (sim) stamp, not wall time
    sim_span_s = (published[-1] - published[0]) / NS
    # 5 Hz of sim time (which runs 5x faster than the wall clock), not 5 Hz of wall time.
    assert 2.5 * sim_span_s - 2 <= len(chunks) <= 5 * sim_span_s + 2, (len(chunks), sim_span_s)
    executor.shutdown()
    node.destroy_node()
    driver.destroy_node()


def _fake_node(ros_name: str, **params: Any) -> tuple[OxygenNode, FakeRuntime]:
    load = FakeRuntime.loader()
    # resume_blend_s 0: the trajectories as the chunks say (no blend from the measured joints after activation)
    values = {"camera_topics": [f"/{ros_name}/cam"], "joint_names": JOINTS, "default_instruction": "go",
              "resume_blend_s": 0.0, **params}
    node = OxygenNode(ros_name, runtime_loader=load, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    return node, load.made[0]


@pytest.mark.parametrize("tokens_per_frame", [0, 2])
def test_decoder_fills_the_slack_or_runs_once_per_tick(ros_context, tokens_per_frame):
    node, runtime = _fake_node(f"decoder_{tokens_per_frame}", control_rate_hz=20.0, tokens_per_frame=tokens_per_frame)
    driver, executor = make_test_node(f"decoder_driver_{tokens_per_frame}")
    executor.add_node(node)
    cam = driver.create_publisher(Image, f"/decoder_{tokens_per_frame}/cam", qos_profile_sensor_data)
    joints = driver.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
    assert wait_for_match(executor, [cam, joints])

    def publish() -> None:
        now = driver.get_clock().now().nanoseconds
        cam.publish(array_to_image(_img(8, 8), "rgb8", stamp=now))
        joints.publish(_joint_state(now, JOINTS, [0.0] * 7))

    assert spin_until(executor, lambda: runtime._ticks >= 8, timeout=20, every=(0.02, publish))
    calls = runtime.decode_calls
    assert calls, "the decoder never ran"
    if tokens_per_frame:  # k tokens per frame: exactly one decode call after each tick
        per_tick = [t for _, _, t in calls]
        assert len(per_tick) == len(set(per_tick)) and len(calls) >= runtime._ticks - 2
    else:  # deadline-aware: every call's deadline lies within one control period (50 ms) of the call
        assert all(0 <= deadline - when <= 0.05 for when, deadline, _ in calls)
    executor.shutdown()
    node.destroy_node()
    driver.destroy_node()


def test_replanning_every_n_steps_with_dropped_actions_and_measured_latency(ros_context):
    """replan=n_action_steps: a chunk every 3 steps; time_alignment=drop: the past actions are dropped, the rest
    start on arrival at their own times; each step is told the last measured latency."""
    # horizon 20: even a chunk delayed 0.8 s by a busy machine still has 3 actions to send
    node, runtime = _fake_node("replan", control_rate_hz=20.0, horizon=20, n_action_steps=3, replan="n_action_steps",
                               time_alignment="drop", trajectory_topic="/replan/trajectory")  # fmt: skip
    driver, executor = make_test_node("replan_driver")
    executor.add_node(node)
    cam = driver.create_publisher(Image, "/replan/cam", qos_profile_sensor_data)
    joints = driver.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
    chunks = Collector(driver, ActionChunk, "/replan/action_chunk", RELIABLE)
    trajectories = Collector(driver, JointTrajectory, "/replan/trajectory", RELIABLE)
    assert wait_for_match(executor, [cam, joints, chunks.subscription, trajectories.subscription])
    # Camera stamps 120 ms in the past: every chunk is at least 3 steps of 50 ms late.
    late_ns = 120_000_000

    def publish() -> None:
        now = driver.get_clock().now().nanoseconds
        cam.publish(array_to_image(_img(8, 8), "rgb8", stamp=now - late_ns))
        joints.publish(_joint_state(now, JOINTS, [0.0] * 7))

    t0 = time.monotonic()
    assert spin_until(executor, lambda: len(trajectories) >= 4, timeout=30, every=(0.01, publish))
    span = time.monotonic() - t0
    assert len(chunks) <= span / 0.15 + 2, (len(chunks), span)  # one chunk per 3 steps of 50 ms, not per tick
    assert node.diag.target_rate_hz == pytest.approx(1 / 0.15)  # diagnostics expect that rate, not 20 Hz
    assert len(chunks) >= len(trajectories)
    for chunk, traj in zip(chunks.messages, trajectories.messages):
        latency = chunk.latency_s
        assert latency >= late_ns / 1e9 and chunk.n_action_steps == 3
        dropped = math.ceil(latency / 0.05 - 1e-6)
        assert (traj.header.stamp.sec, traj.header.stamp.nanosec) == (0, 0)
        assert len(traj.points) == 3
        first = stamp_to_ns(traj.points[0].time_from_start) / 1e9
        assert first == pytest.approx((dropped + 1) * 0.05 - latency, abs=1e-3)
        assert traj.points[0].positions[0] == pytest.approx(float(runtime._actions[dropped, 0]))
    assert runtime.step_calls[0] == (0.05, 0.0)  # nothing measured yet
    assert all(period == 0.05 and latency >= late_ns / 1e9 for period, latency in runtime.step_calls[1:])
    executor.shutdown()
    node.destroy_node()
    driver.destroy_node()


def test_engine_failure_and_non_finite_actions_skip_the_chunk_and_keep_running(ros_context):
    node, runtime = _fake_node("failing", control_rate_hz=20.0)
    driver, executor = make_test_node("failing_driver")
    executor.add_node(node)
    cam = driver.create_publisher(Image, "/failing/cam", qos_profile_sensor_data)
    joints = driver.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
    chunks = Collector(driver, ActionChunk, "/failing/action_chunk", RELIABLE)
    assert wait_for_match(executor, [cam, joints, chunks.subscription])

    def publish() -> None:
        now = driver.get_clock().now().nanoseconds
        cam.publish(array_to_image(_img(8, 8), "rgb8", stamp=now))
        joints.publish(_joint_state(now, JOINTS, [0.0] * 7))

    assert spin_until(executor, lambda: len(chunks) >= 2, timeout=20, every=(0.02, publish))
    runtime.fail_next = True
    runtime._actions[0, 0] = np.nan
    start = len(chunks)
    spin_for(executor, 0.3, every=(0.02, publish))
    assert len(chunks) == start  # a NaN action never leaves the node
    assert runtime.forgotten >= 1  # and the next chunk does not continue it
    assert node.diag._errors >= 2  # the raised step and the NaN chunk are both counted
    runtime._actions[0, 0] = 0.0
    assert spin_until(executor, lambda: len(chunks) >= start + 2, timeout=20, every=(0.02, publish))
    executor.shutdown()
    node.destroy_node()
    driver.destroy_node()


# ============================================================================== the node process
TEST_OVERRIDES = {
    # The wrist camera as CompressedImage through the '/compressed' suffix convention.
    "camera_topics": ["camera/base/image_raw", "", "camera/wrist/image_raw/compressed"],
    "camera_widths": [64, 0, 64],
    "camera_heights": [48, 0, 48],
    "max_observation_age_s": 0.7,  # generous: the test driver shares 2 busy cores with the node
    "diagnostics_period_s": 0.25,
    "default_instruction": "",
    # A random model's actions leave the joint ranges: clamped (what this module checks), not refused as no command.
    "limit_out_of_range_margin": 100.0,
}
INSTRUCTION = "pick up the red cup"


class Robot:
    """The test side: fake sensors (publishing on demand) and collectors of everything the node sends."""

    def __init__(self, node: Any, executor: Any, namespace: str = "") -> None:
        self.node, self.executor = node, executor
        me = f"{namespace}/oxygen_node"
        # The configs' topic names are relative: the node's namespace moves every one of them.
        self.base_pub = node.create_publisher(Image, f"{namespace}/camera/base/image_raw", qos_profile_sensor_data)
        self.wrist_pub = node.create_publisher(
            CompressedImage, f"{namespace}/camera/wrist/image_raw/compressed", qos_profile_sensor_data)
        self.joint_pub = node.create_publisher(JointState, f"{namespace}/joint_states", qos_profile_sensor_data)
        self.instruction_pub = node.create_publisher(String, f"{me}/instruction", LATCHED)
        self.chunks = Collector(node, ActionChunk, f"{me}/action_chunk", RELIABLE)
        self.trajectories = Collector(node, JointTrajectory, f"{namespace}/joint_trajectory_controller/joint_trajectory", RELIABLE)
        self.deltas = {t: Collector(node, TextDelta, f"{me}/text/{t}", RELIABLE) for t in ("language", "memory")}
        self.finals = {t: Collector(node, String, f"{me}/text/{t}/final", RELIABLE) for t in ("language", "memory")}
        self.diagnostics = Collector(node, DiagnosticArray, "/diagnostics", RELIABLE)
        rng = np.random.default_rng(0)
        self.rgb = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
        self.jpeg = _jpeg(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))
        self.base_stamps: set[int] = set()
        self.reset()

    def reset(self) -> None:
        """Good inputs from now on."""
        self.base: Callable[[int], Any] | None = lambda stamp: array_to_image(self.rgb, "rgb8", stamp=stamp, frame_id="base")
        self.wrist: Callable[[int], Any] | None = self._good_wrist
        self.joints: Callable[[int], Any] | None = lambda stamp: _joint_state(stamp, JOINTS, [0.1] * 7)

    def _good_wrist(self, stamp: int) -> CompressedImage:
        msg = CompressedImage(format="jpeg", data=self.jpeg)
        msg.header.stamp = ns_to_stamp(stamp)
        return msg

    def publish(self) -> None:
        stamp = self.node.get_clock().now().nanoseconds
        for make, pub in ((self.base, self.base_pub), (self.wrist, self.wrist_pub), (self.joints, self.joint_pub)):
            msg = make(stamp) if make else None
            if msg is not None:
                pub.publish(msg)
                if pub is self.base_pub:
                    self.base_stamps.add(stamp_to_ns(msg.header.stamp))

    def instruct(self, text: str) -> None:
        self.instruction_pub.publish(String(data=text))

    def spin_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Spin while publishing sensor data at 10 Hz."""
        return spin_until(self.executor, predicate, timeout, every=(0.1, self.publish))

    def inputs(self, after: float = 0.0) -> dict[str, int]:
        """Counters of the latest inputs status (received after `after`, a time.monotonic value)."""
        for msg, t in zip(reversed(self.diagnostics.messages), reversed(self.diagnostics.times)):
            if t < after:
                break
            for status in msg.status:
                if status.name.endswith(": inputs"):
                    return {kv.key: int(kv.value) for kv in status.values}
        return {}

    def fresh_inputs(self) -> dict[str, int]:
        t0 = time.monotonic()
        assert self.spin_until(lambda: bool(self.inputs(after=t0)), timeout=10), "no /diagnostics from the node"
        return self.inputs(after=t0)


def _jpeg(rgb: np.ndarray) -> bytes:
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.fromarray(rgb).save(buf, format="JPEG")
    return buf.getvalue()


def _joint_state(stamp: int, names: list[str], positions: list[float]) -> JointState:
    msg = JointState(name=[*names, "panda_finger_joint1"], position=[*positions, 0.04])
    msg.header.stamp = ns_to_stamp(stamp)
    return msg


@pytest.fixture(scope="module")
def ros_context():
    rclpy.init()
    yield
    rclpy.shutdown()


def _bring_up(robot: Robot, proc: NodeProcess) -> None:
    """Wait for discovery, send the instruction, and wait for the first chunk (model warm-up included)."""
    robot.process = proc
    ok = wait_for_match(robot.executor, [robot.base_pub, robot.chunks.subscription, robot.instruction_pub], timeout=60)
    assert ok and proc.running, f"node did not come up:\n{proc.output()}"
    robot.instruct(INSTRUCTION)
    assert robot.spin_until(lambda: len(robot.chunks) >= 1 or not proc.running, timeout=90) and proc.running, (
        f"no action chunk from the node:\n{proc.output()}"
    )


@contextmanager
def robot_process(folder: Path, driver: str, overrides: dict[str, Any]) -> Iterator[Robot]:
    """oxygen_node (config/demo.yaml + `overrides`) in its own process, a driver node, the first chunk received."""
    node, executor = make_test_node(driver)
    robot = Robot(node, executor)
    params = write_params(folder / f"{driver}.yaml", overrides)
    proc = NodeProcess([REPO / "config" / "demo.yaml", params]).start()
    try:
        _bring_up(robot, proc)
        yield robot
    finally:
        proc.close()
        executor.shutdown()
        node.destroy_node()


@pytest.fixture(scope="module")
def live(ros_context, tmp_path_factory):
    """One oxygen_node process for the module, a driver node, and the first chunk already received."""
    with robot_process(tmp_path_factory.mktemp("params"), "oxygen_test_driver", TEST_OVERRIDES) as robot:
        yield robot


def test_chunks_and_trajectories_at_the_control_rate(live):
    t0 = time.monotonic()
    assert live.spin_until(lambda: len(live.chunks.since(t0)) >= 8, timeout=30), live.process.output()[-3000:]
    times = [t for t in live.chunks.times if t >= t0]
    rate = (len(times) - 1) / (times[-1] - times[0])
    assert 2.5 <= rate <= 7.5, f"{rate:.2f} Hz for a 5 Hz node"
    chunks = live.chunks.since(t0)
    for chunk in chunks:
        assert (chunk.horizon, chunk.action_dim) == (10, 8)
        assert len(chunk.data) == 80 and all(math.isfinite(x) for x in chunk.data)
        assert list(chunk.joint_names) == JOINTS
        assert stamp_to_ns(chunk.step_period) == 200_000_000
        assert stamp_to_ns(chunk.header.stamp) in live.base_stamps  # the observation's stamp
        assert chunk.header.frame_id == "base" and chunk.engine_mode == "oxygen"
        assert chunk.prefill_latency_s > 0 and chunk.action_latency_s > 0
        assert chunk.latency_s >= chunk.prefill_latency_s + chunk.action_latency_s and chunk.n_action_steps == 10
    seqs = [c.frame_seq for c in chunks]
    assert seqs == sorted(set(seqs))
    assert live.spin_until(lambda: len(live.trajectories.since(t0)) >= 8, timeout=10)
    chunk_stamps = {stamp_to_ns(c.header.stamp) for c in live.chunks.messages}
    for traj in live.trajectories.since(t0):
        assert list(traj.joint_names) == JOINTS
        assert stamp_to_ns(traj.header.stamp) in chunk_stamps  # time_alignment 'stamp': the observation's time
        assert [stamp_to_ns(p.time_from_start) for p in traj.points] == [200_000_000 * (i + 1) for i in range(10)]
        positions = np.array([p.positions for p in traj.points])
        assert positions.shape == (10, 7)
        assert np.all(positions >= np.array(LOWER) - 1e-6) and np.all(positions <= np.array(UPPER) + 1e-6)


def test_the_wait_for_the_first_chunk_is_logged_once(live):
    """Time to the first chunk after activate, and since the process started (loading and compiling included)."""
    t0 = time.monotonic()
    assert live.spin_until(lambda: len(live.chunks.since(t0)) >= 2, timeout=30)
    found = re.findall(r"first chunk: (\d+\.\d) s after activate, (\d+\.\d) s after the process started",
                       live.process.output())
    assert len(found) == 1, live.process.output()[-3000:]
    after_activate, after_start = map(float, found[0])
    assert 0 <= after_activate <= after_start


def _statuses(msg: DiagnosticArray) -> dict[str, DiagnosticStatus]:
    return {s.name: s for s in msg.status}


def test_diagnostics_report_rate_latency_text_and_kv(live):
    def rate_ok() -> bool:  # the 3 s window may still hold start-up ticks without a chunk: wait it out
        if not live.diagnostics.messages:
            return False
        control = _values(_statuses(live.diagnostics.messages[-1])["oxygen_ros: control"])
        return control["achieved_rate_hz"] != "n/a" and 2.5 <= float(control["achieved_rate_hz"]) <= 7.5

    assert live.spin_until(rate_ok, timeout=15), live.diagnostics.messages[-1]
    statuses = _statuses(live.diagnostics.messages[-1])
    assert set(statuses) == {f"oxygen_ros: {n}" for n in ("control", "inputs", "text", "kv", "topics", "safety", "node")}
    assert statuses["oxygen_ros: node"].message == "active"
    topics = _values(statuses["oxygen_ros: topics"])
    for topic in ("/camera/base/image_raw", "/camera/wrist/image_raw/compressed", "joint_states"):  # resolved names
        # Input ages per camera (node clock minus stamp at the tick): the test publishes at 10 Hz, 5 Hz ticks.
        assert 0 <= float(topics[f"input_age_s {topic} mean"]) <= float(topics[f"input_age_s {topic} max"]) < 2.0
    # Chunk latency: observation stamp to publish, at least the model's work, well under a second here.
    latency = float(topics["chunk_latency_s mean"])
    assert float(_values(statuses["oxygen_ros: control"])["last_tick_work_s"]) * 0.5 <= latency < 2.0
    control = _values(statuses["oxygen_ros: control"])
    assert control["target_rate_hz"] == "5.0"
    assert float(control["prefill_latency_s"]) > 0 and float(control["action_latency_s"]) > 0
    assert int(control["deadline_misses"]) >= 0 and "last_tick_work_s" in control
    text = _values(statuses["oxygen_ros: text"])
    assert float(text["tokens_per_s"]) > 0 and float(text["decode_latency_s"]) > 0
    assert {"live_requests", "waiting_requests", "refused_requests"} <= set(text)
    kv = _values(statuses["oxygen_ros: kv"])
    assert int(kv["kv_budget_bytes"]) == 64 * 2**20 and int(kv["kv_used_bytes"]) >= 0
    inputs = _values(statuses["oxygen_ros: inputs"])
    assert {"dropped_inputs", "stale_inputs", "skipped_ticks", "rejected_image", "masked_slot"} <= set(inputs)
    assert all(s.hardware_id == "cpu" for s in statuses.values())


def _requests(deltas: list[TextDelta]) -> dict[int, list[TextDelta]]:
    by_id: dict[int, list[TextDelta]] = {}
    for d in deltas:
        by_id.setdefault(d.request_id, []).append(d)
    return by_id


def test_text_streams_concatenate_to_the_final_string(live):
    def finished(task: str) -> int:
        return sum(1 for d in live.deltas[task].messages if d.final)

    assert live.spin_until(lambda: finished("language") >= 3 and finished("memory") >= 1, timeout=30), (
        live.process.output()[-3000:]
    )
    assert live.spin_until(
        lambda: all(len(live.finals[t]) >= finished(t) for t in ("language", "memory")), timeout=10
    )
    for task in ("language", "memory"):
        final_order = [d.request_id for d in live.deltas[task].messages if d.final]
        requests = _requests(live.deltas[task].messages)
        for k, request_id in enumerate(final_order):
            parts = requests[request_id]
            assert [d.seq for d in parts] == list(range(len(parts))), "deltas lost or out of order"
            assert [d.final for d in parts] == [False] * (len(parts) - 1) + [True]
            assert parts[-1].finish_reason in ("eos", "max_tokens", "stop")
            assert all(d.finish_reason == "" for d in parts[:-1])
            assert all(d.task == task for d in parts)
            source = {(stamp_to_ns(d.source_stamp), d.source_frame_seq) for d in parts}
            assert len(source) == 1 and next(iter(source))[0] in live.base_stamps
            assert sum(len(d.token_ids) for d in parts) >= 1
            assert "".join(d.text for d in parts) == live.finals[task].messages[k].data


def test_parameters_are_refused_or_applied_over_the_service(live):
    client = AsyncParameterClient(live.node, "/oxygen_node")
    assert spin_until(live.executor, client.services_are_ready, timeout=15)

    def call(*params: Parameter) -> list[Any]:
        future = client.set_parameters(list(params))
        assert spin_until(live.executor, future.done, timeout=10)
        return future.result().results

    bad = call(Parameter("control_rate_hz", value=0.0), Parameter("engine_mode", value="sequential"),
               Parameter("joint_limits_lower", value=[0.0, 0.0]))
    assert [r.successful for r in bad] == [False, False, False]
    assert "control_rate_hz must be > 0" in bad[0].reason
    assert "read-only" in bad[1].reason
    assert "must be given together" in bad[2].reason or "one entry per joint" in bad[2].reason
    good = call(Parameter("max_observation_age_s", value=1.5))
    assert good[0].successful, good[0].reason
    future = client.get_parameters(["max_observation_age_s", "control_rate_hz"])
    assert spin_until(live.executor, future.done, timeout=10)
    assert [v.double_value for v in future.result().values] == [1.5, 5.0]
    assert call(Parameter("max_observation_age_s", value=TEST_OVERRIDES["max_observation_age_s"]))[0].successful
    # Declared types are kept: an integer for a double is converted (`ros2 param set ... 5`), a string refused.
    assert call(Parameter("control_rate_hz", value=5))[0].successful
    future = client.get_parameters(["control_rate_hz"])
    assert spin_until(live.executor, future.done, timeout=10)
    value = future.result().values[0]
    assert value.type == ParameterType.PARAMETER_DOUBLE and value.double_value == 5.0
    wrong = call(Parameter("control_rate_hz", value="fast"), )[0]
    assert not wrong.successful and "type" in wrong.reason.lower()


def test_every_parameter_has_a_value_and_a_dump_loads_back(live, tmp_path):
    """`ros2 param dump` through the services: every declared parameter answers (empty lists included), and
    the dump, written as a params file, starts a node with the same values."""
    client = AsyncParameterClient(live.node, "/oxygen_node")
    assert spin_until(live.executor, client.services_are_ready, timeout=15)
    future = client.list_parameters()
    assert spin_until(live.executor, future.done, timeout=10)
    names = sorted(future.result().result.names)
    assert set(P.SPECS) <= set(names)
    future = client.get_parameters(names)
    assert spin_until(live.executor, future.done, timeout=10)
    values = future.result().values
    assert len(values) == len(names), "GetParameters answered only part of the list: some parameter is unset"
    unset = [n for n, v in zip(names, values) if v.type == ParameterType.PARAMETER_NOT_SET]
    assert not unset, unset
    dumped = {n: parameter_value_to_python(v) for n, v in zip(names, values)}
    for name in ("camera_compressed", "task_stop", "camera_optional", "joint_names"):
        assert isinstance(dumped[name], list), (name, dumped[name])
    assert dumped["camera_compressed"] == [] and dumped["task_stop"] == []
    assert dumped["camera_optional"] == [False, True, True]
    dump = write_params(tmp_path / "dump.yaml", dumped, node="/oxygen_node")
    context = rclpy.Context()
    rclpy.init(context=context, args=["test", "--ros-args", "--params-file", str(dump)])
    try:
        node = OxygenNode(runtime_loader=FakeRuntime.loader(), context=context)
        try:
            for name in P.SPECS:
                got = node.get_parameter(name).value
                got = list(got) if isinstance(got, (list, tuple)) or type(got).__name__ == "array" else got
                assert got == dumped[name], name
            assert node.get_parameter("camera_compressed").type_ == Parameter.Type.BOOL_ARRAY
        finally:
            node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


# ----------------------------------------------------------------------------------- bad inputs
def _bad_image(**fields: Any) -> Callable[[Robot], None]:
    def setup(robot: Robot) -> None:
        def make(stamp: int) -> Image:
            msg = array_to_image(robot.rgb, "rgb8", stamp=stamp)
            for key, value in fields.items():
                setattr(msg, key, value)
            return msg

        robot.base = make

    return setup


def _set(attr: str, make: Callable[[Robot], Callable[[int], Any] | None]) -> Callable[[Robot], None]:
    def setup(robot: Robot) -> None:
        setattr(robot, attr, make(robot))

    return setup


def _garbage_jpeg(stamp: int) -> CompressedImage:
    msg = CompressedImage(format="jpeg", data=b"this is not a jpeg")
    msg.header.stamp = ns_to_stamp(stamp)
    return msg


@dataclass
class Scenario:
    name: str
    setup: Callable[[Robot], None]
    counter: str  # the counter that must grow
    log: str  # a piece of the warning the node must print
    blocks: bool = True  # no chunk while the input is bad (False: a masked optional slot, chunks go on)
    instruction: bool = False  # recover by re-publishing the good instruction


SCENARIOS = [
    Scenario("unsupported encoding", _bad_image(encoding="32FC1"), "skipped_rejected_image", "'32FC1' is not supported"),
    Scenario("zero size", _bad_image(height=0, width=0), "skipped_rejected_image", "image has zero size"),
    Scenario("data length", _bad_image(data=bytes(100)), "skipped_rejected_image", "image data has 100 bytes"),
    Scenario("wrong size",
             _set("base", lambda r: lambda s: array_to_image(np.zeros((24, 32, 3), np.uint8), "rgb8", stamp=s)),
             "skipped_rejected_image", "image is 32x24, slot 0 expects 64x48"),
    Scenario("stale image",
             _set("base", lambda r: lambda s: array_to_image(r.rgb, "rgb8", stamp=s - 10 * NS)),
             "skipped_stale_image", "away from now"),
    Scenario("required camera stops", _set("base", lambda r: None), "skipped_stale_image", "away from now"),
    Scenario("bad optional camera is masked", _set("wrist", lambda r: _garbage_jpeg), "masked_slot",
             "cannot decode compressed image", blocks=False),
    Scenario("optional camera stops", _set("wrist", lambda r: None), "masked_slot", "", blocks=False),
    Scenario("missing joint",
             _set("joints", lambda r: lambda s: _joint_state(s, JOINTS[:2] + JOINTS[3:], [0.0] * 6)),
             "skipped_rejected_joint_state", "lacks joints ['panda_joint3']"),
    Scenario("NaN joint",
             _set("joints", lambda r: lambda s: _joint_state(s, JOINTS, [0.0, float("nan")] + [0.0] * 5)),
             "skipped_rejected_joint_state", "non-finite positions for joints ['panda_joint2']"),
    Scenario("empty instruction", lambda r: r.instruct("   "), "skipped_rejected_instruction", "instruction is empty",
             instruction=True),
    Scenario("instruction over max_instruction_chars", lambda r: r.instruct("go " * 1000),
             "skipped_rejected_instruction", "at most 2000 are allowed", instruction=True),
    # Cut to the token limit as openpi and LeRobot do: counted and warned, chunks go on.
    Scenario("instruction over the prompt budget", lambda r: r.instruct("put the cup on the plate " * 20),
             "prompts_truncated", "prompt cut to 96 tokens", blocks=False, instruction=True),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_bad_input_is_logged_counted_and_recovered_from(live, scenario):
    before = live.fresh_inputs().get(scenario.counter, 0)
    scenario.setup(live)
    grew = live.spin_until(lambda: live.inputs().get(scenario.counter, 0) > before, timeout=15)
    assert grew, f"{scenario.counter} did not grow: {live.inputs()}\n{live.process.output()[-3000:]}"
    marked = time.monotonic()
    if scenario.blocks:
        spin_for(live.executor, 0.45, every=(0.1, live.publish))  # two more ticks at 5 Hz
        late = [t for t in live.chunks.times if t > marked + 0.05]
        assert not late, f"{len(late)} chunks published while {scenario.name}"
    else:
        assert live.spin_until(lambda: len(live.chunks.since(marked)) >= 2, timeout=15), "chunks stopped"
    if scenario.log:
        assert live.spin_until(lambda: scenario.log in live.process.output(), timeout=5), live.process.output()[-3000:]
    live.reset()
    if scenario.instruction:
        live.instruct(INSTRUCTION)
    recovered = time.monotonic()
    assert live.spin_until(lambda: len(live.chunks.since(recovered)) >= 2, timeout=20), (
        f"no chunks after {scenario.name} ended:\n{live.process.output()[-3000:]}"
    )
    assert live.process.running


def test_sigint_exits_cleanly(live):
    assert live.spin_until(lambda: len(live.deltas["language"]) > 0, timeout=10)
    code = live.process.stop(timeout=30, executor=live.executor)
    out = live.process.output()
    assert code == 0, out[-3000:]
    assert "Traceback" not in out and "stopped (" in out
    # Every request whose deltas were published ends with a final delta (cancelled ones included).
    assert spin_until(live.executor, lambda: _every_request_ended(live), timeout=10)


def _every_request_ended(robot: Robot) -> bool:
    return all(parts[-1].final for c in robot.deltas.values() for parts in _requests(c.messages).values())


def test_sigint_cancels_live_text_requests(ros_context, tmp_path):
    """One token per tick keeps requests alive across frames; SIGINT must end each with a final delta.

    Two SIGINTs 50 ms apart (a terminal and `ros2 launch` both forwarding one Ctrl-C) are one request: the
    exit is still clean and the final text still goes out. The node runs in namespace /slow with the config's
    relative topic names: its cameras, joint states and trajectory all moved under /slow."""
    node, executor = make_test_node("oxygen_sigint_driver")
    robot = Robot(node, executor, namespace="/slow")
    params = write_params(tmp_path / "slow_text.yaml", {**TEST_OVERRIDES, "tokens_per_frame": 1, "task_max_tokens": [40, 40]})
    try:
        with NodeProcess([REPO / "config" / "demo.yaml", params], ros_args=["-r", "__ns:=/slow"]) as proc:
            _bring_up(robot, proc)
            assert robot.spin_until(lambda: len(_requests(robot.deltas["language"].messages)) >= 2, timeout=20)
            assert robot.spin_until(lambda: len(robot.trajectories) >= 1, timeout=10)  # /slow/joint_trajectory_...
            code = proc.stop(timeout=30, executor=executor, repeat_after=0.05)
            out = proc.output()
        assert code == 0 and "Traceback" not in out, out[-3000:]
        assert spin_until(executor, lambda: _every_request_ended(robot), timeout=10)
        for task in ("language", "memory"):
            finals = [d for d in robot.deltas[task].messages if d.final]
            assert spin_until(executor, lambda: len(robot.finals[task]) >= len(finals), timeout=10)
            requests = _requests(robot.deltas[task].messages)
            for k, final in enumerate(finals):
                assert "".join(d.text for d in requests[final.request_id]) == robot.finals[task].messages[k].data
        reasons = [d.finish_reason for c in robot.deltas.values() for d in c.messages if d.final]
        assert "cancelled" in reasons, reasons
        # One token per tick: a request's deltas span several frames, i.e. decoding crossed ticks.
        assert max(len(parts) for parts in _requests(robot.deltas["language"].messages).values()) >= 2
    finally:
        executor.shutdown()
        node.destroy_node()


# ---------------------------------------------------------------------------------- start-up errors
def test_a_checkpoint_that_fails_to_load_exits_1_with_one_line(tmp_path):
    empty = tmp_path / "empty_checkpoint"
    empty.mkdir()
    params = write_params(tmp_path / "bad.yaml", {"checkpoint": str(empty), "tokenizer": ""})
    with NodeProcess([REPO / "config" / "demo.yaml", params]) as proc:
        code = proc.wait(timeout=60)
        out = proc.output()
    assert code == 1, out
    assert "Traceback" not in out
    errors = [line for line in out.splitlines() if line.startswith("oxygen_node: error:")]
    assert len(errors) == 1 and "cannot load the model" in errors[0] and str(empty) in errors[0], out
