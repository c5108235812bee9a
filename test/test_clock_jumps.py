"""Clock jumps piece by piece: rcl's jump callbacks fire on the node clock under use_sim_time when /clock goes back
or forward (proved over DDS, since the node relies on it), the monotonic check for system time, the inputs and
diagnostics of the other timeline, replanning after a jump, the KV peaks, and episodes made as they start."""

from __future__ import annotations

import numpy as np
import pytest
import rclpy
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock

from oxygen_ros.interface.convert import ns_to_stamp
from oxygen_ros.interface.inputs import AFTER_CLOCK_JUMP, InputStore, ObservationError
from oxygen_ros.kv import KVCacheManager, KVPool
from oxygen_ros.ros.diagnostics import Diagnostics
from oxygen_ros.ros.time_jumps import ClockJumpWatch
from oxygen_ros.runtime.alignment import replan_due
from oxygen_ros.runtime.clock_jumps import BACK_TOLERANCE_S, ClockJump, MonotonicCheck
from oxygen_ros.sim.episode import EpisodeSpec
from oxygen_ros.sim.runner import HeldOutEpisodes

from ros_helpers import make_test_node, spin_until, wait_for_match

NS = 1_000_000_000
OK, WARN, ERROR = b"\x00", b"\x01", b"\x02"


def test_the_node_clock_calls_its_jump_callbacks_when_sim_time_jumps() -> None:
    """Under use_sim_time, /clock moving back (any amount) or forward by 1 s or more calls the callback with the
    jump; small steps and the first /clock (the clock starting from 0) do not."""
    rclpy.init()
    try:
        node = rclpy.create_node("jump_probe", parameter_overrides=[Parameter("use_sim_time", value=True)])
        driver, executor = make_test_node("jump_probe_clock")
        executor.add_node(node)
        seen: list[ClockJump] = []
        watch = ClockJumpWatch(node.get_clock(), seen.append)
        clock = driver.create_publisher(Clock, "/clock", 10)
        assert wait_for_match(executor, [clock])
        times = [100 * NS, 100 * NS + NS // 100, 70 * NS, 70 * NS + 5 * NS // 10, 130 * NS, 130 * NS - NS // 1000]
        for i, t in enumerate(times):
            clock.publish(Clock(clock=ns_to_stamp(t)))
            assert spin_until(executor, lambda: node.get_clock().now().nanoseconds == t, 10), i
        watch.check()  # ROS time is active: the monotonic check stays out
        assert [(j.delta_ns, j.now_ns, j.back) for j in seen] == [
            (-30 * NS - NS // 100, 70 * NS, True), (60 * NS - 5 * NS // 10, 130 * NS, False), (-NS // 1000, 130 * NS - NS // 1000, True)]
        assert seen[0].describe() == "clock jumped back 30.010 s (100.010 s -> 70.000 s, /clock)"
        watch.close()
        executor.shutdown()
        node.destroy_node()
        driver.destroy_node()
    finally:
        rclpy.shutdown()


class _Machine:
    """A system clock and a monotonic clock that advance together; `step` moves the system clock alone, `stall`
    lets time pass inside the next system-clock reading (a thread preempted between the readings)."""

    def __init__(self) -> None:
        self.t = 5 * NS  # monotonic time
        self.offset = 995 * NS  # system clock minus monotonic
        self.stalls: list[int] = []  # the next system-clock readings' preemptions

    def monotonic(self) -> int:
        self.t += 2_000  # a reading takes 2 µs
        return self.t

    def system(self) -> int:
        self.t += 2_000
        reading = self.t + self.offset  # read, then the thread loses the processor before the next reading
        self.t += self.stalls.pop(0) if self.stalls else 0
        return reading

    def passes(self, seconds: float) -> None:
        self.t += int(seconds * NS)


def test_the_monotonic_check_finds_a_stepped_system_clock() -> None:
    m = _Machine()
    check = MonotonicCheck(forward_s=1.0, back_s=0.01, monotonic_ns=m.monotonic)
    assert check.read(m.system) is None  # the first reading
    m.passes(0.2)
    assert check.read(m.system) is None  # both moved 0.2 s
    m.passes(0.3)
    m.offset -= 10 * NS + NS // 5  # the system clock stepped back 10.2 s while 0.3 s passed
    jump = check.read(m.system)
    assert jump is not None and jump.back and jump.delta_ns == pytest.approx(-(10 * NS + NS // 5), abs=10_000)
    m.passes(0.5)
    assert check.read(m.system) is None
    m.offset += 94 * NS
    jump = check.read(m.system)
    assert jump is not None and not jump.back and "forward 94.000 s" in jump.describe()


def test_a_thread_preempted_between_the_clock_readings_sees_no_jump() -> None:
    """Preempted for 10 ms to 2 s between reading the system clock and the monotonic one (every try of a check,
    or some): never a jump, while a 22 ms step made between two such readings is still found."""
    m = _Machine()
    check = MonotonicCheck(forward_s=1.0, back_s=0.01, monotonic_ns=m.monotonic, tries=3)
    assert check.read(m.system) is None
    for stall_s in (0.01, 0.05, 0.3, 2.0):
        m.passes(0.2)
        m.stalls = [int(stall_s * NS)] * 3  # every try preempted
        assert check.read(m.system) is None, stall_s
        m.passes(0.2)
        m.stalls = [int(stall_s * NS)]  # the first try preempted, the next ones not
        assert check.read(m.system) is None, stall_s
    # The check the node had before (system clock, then monotonic, one after the other) saw a jump back here:
    m.passes(0.2)
    m.stalls = [NS // 50]
    system = m.system()
    assert system - m.monotonic() - m.offset < -BACK_TOLERANCE_S * NS
    # A real step of 22 ms back between tight readings is found, and one behind a preempted reading too.
    m.passes(0.2)
    m.offset -= 22 * NS // 1000
    jump = check.read(m.system)
    assert jump is not None and jump.back and jump.delta_ns == pytest.approx(-22 * NS // 1000, abs=10_000)
    m.passes(0.2)
    m.stalls = [NS // 100] * 3
    m.offset -= 50 * NS // 1000
    jump = check.read(m.system)  # 50 ms back, each reading uncertain by 10 ms: still a step beyond doubt
    assert jump is not None and jump.back


def test_a_slewed_clock_is_no_jump() -> None:
    """A clock slewed 500 ppm against the monotonic one (NTP's largest slew) for an hour of 5 Hz ticks: no jump."""
    m = _Machine()
    check = MonotonicCheck(forward_s=1.0, back_s=0.01, monotonic_ns=m.monotonic)
    for _ in range(5 * 3600):
        m.passes(0.2)
        m.offset -= int(0.2 * 500e-6 * NS)
        assert check.read(m.system) is None
    assert m.offset < 995 * NS - int(1.7 * NS)  # the clock fell 1.8 s behind, without a step


@pytest.mark.parametrize("back_s", [0.022, 30.0])
def test_inputs_stamped_after_a_backward_step_are_used_within_one_control_period(back_s: float) -> None:
    """The clock steps back (22 ms: what a preempted reading looked like; 30 s: a bag's loop); images and joint
    states stamped on the new clock come at 30 Hz: the tick one control period (0.2 s) after the jump has its
    observation, and so do ticks 1, 10 and 60 s later. A message of the old timeline still on its way is dropped."""
    store = InputStore(["/base"], [False], [(0, 0)], use_state=True)
    image = np.zeros((4, 4, 3), np.uint8)
    before, after = 1000 * NS, 1000 * NS - int(back_s * NS)
    store.put_image(0, image, before - NS // 30, before - NS // 30)
    store.put_joint_state(np.zeros(3), before - NS // 30, before - NS // 30)
    store.put_instruction("wave", before)
    timeline = store.timeline
    store.restart(before, after)
    store.put_image(0, image, before - NS // 100, after + NS // 200, timeline=timeline)  # read before the restart
    store.put_image(0, image, before - NS // 200, after + NS // 100)  # sent before the jump, arrived after
    if back_s > 1:  # (after 22 ms either timeline is as good: they may be taken)
        assert store.counters()["dropped_after_clock_jump"] == 2
    for t in range(after + NS // 30, after + 61 * NS, NS // 30):  # 30 Hz on the new clock, 5 ms on the way
        store.put_image(0, image, t, t + NS // 200)
        store.put_joint_state(np.zeros(3), t, t + NS // 200)
        if t + NS // 200 >= after + NS // 5 and (t - after) % NS < NS // 30 or t == after + 6 * NS // 30:
            obs = store.snapshot(t + NS // 100, NS // 2)  # a tick, 0.2 s and then every second after the jump
            assert obs.stamp_ns == t
    assert store.counters()["skipped_after_clock_jump"] == 0


def test_inputs_of_the_other_timeline_are_dropped_and_awaited_without_alarm() -> None:
    store = InputStore(["/base", "/wrist"], [False, True], [(0, 0), (0, 0)], use_state=True)
    image = np.zeros((4, 4, 3), np.uint8)
    store.put_image(0, image, 1000 * NS, 1000 * NS)
    store.put_image(1, image, 1000 * NS, 1000 * NS)
    store.put_joint_state(np.zeros(3), 1000 * NS, 1000 * NS)
    store.put_instruction("wave", 1000 * NS)
    assert store.restart(1000 * NS, 970 * NS) == 3  # two images and the joint state; the instruction stays
    store.put_image(0, image, 1000 * NS - NS // 10, 970 * NS + NS // 100)  # of the old timeline, late: dropped
    with pytest.raises(ObservationError) as exc:
        store.snapshot(970 * NS, NS // 2)
    assert exc.value.kind == AFTER_CLOCK_JUMP and store.ages_s(970 * NS) == {"/base": None, "/wrist": None, "joint_states": None}
    store.put_image(0, image, 970 * NS, 970 * NS)
    with pytest.raises(ObservationError, match="no joint state since the clock jumped"):
        store.snapshot(970 * NS, NS // 2)
    store.put_joint_state(np.zeros(3), 970 * NS, 970 * NS)
    obs = store.snapshot(970 * NS, NS // 2)  # the optional wrist camera not sent again yet: masked, not counted
    assert obs.masked == [1] and obs.instruction == "wave"
    counters = store.counters()
    assert counters["skipped_after_clock_jump"] == 2 and counters["masked_slot"] == 0
    assert counters["dropped_after_clock_jump"] == 1
    # The wrist camera, masked in that observation, has sent nothing of the new timeline: a late image of the
    # old one is still dropped (not taken and then reported stale)
    store.put_image(1, image, 1000 * NS - NS // 20, 970 * NS + NS // 50)
    assert store.counters()["dropped_after_clock_jump"] == 2 and store.ages_s(970 * NS)["/wrist"] is None
    store.put_image(0, image, 999 * NS, 971 * NS)  # the base camera is on the new timeline: whatever follows is taken
    assert store.ages_s(971 * NS)["/base"] == pytest.approx(-28.0)


def _steady(d: Diagnostics, start_ns: int, seconds: float, rate_hz: float) -> int:
    t, period = start_ns, int(NS / rate_hz)
    while t < start_ns + seconds * NS:
        d.tick_started(t)
        d.chunk_published(t + NS // 20, work_s=0.01, stamp_ns=t)
        t += period
    return t


def _control(d: Diagnostics, now_ns: int) -> tuple[bytes, str, dict[str, str]]:
    status = d.report(now_ns, {})[0]
    return status.level, status.message, {kv.key: kv.value for kv in status.values}


def test_diagnostics_restart_their_windows_at_a_jump_and_raise_no_false_alarm() -> None:
    d = Diagnostics(target_rate_hz=2.5, window_s=3.0)
    t = _steady(d, 1000 * NS, 10, 2.5)
    level, _, values = _control(d, t)
    # 2.5 Hz from the stamps: a sliding count over 3 s would read 2.333 or 2.667
    assert level == OK and values["achieved_rate_hz"] == "2.5" and values["chunks_in_window"] == "7"
    d.clock_jumped(ClockJump(60 * NS, t + 60 * NS, "/clock"))  # forward 60 s: not "no chunk for 60 s"
    level, message, values = _control(d, t + 60 * NS + NS // 5)
    assert level == OK and "jumped forward 60.000 s" in message and values["achieved_rate_hz"] == "0.0"
    assert (values["clock_jumps_back"], values["clock_jumps_forward"]) == ("0", "1")
    level, message, _ = _control(d, t + 60 * NS + 3 * NS // 2)  # silent 1.5 s after the jump: that is real
    assert level == ERROR and "since the clock jumped forward" in message
    t2 = _steady(d, t + 60 * NS + 2 * NS, 2, 2.5)
    level, _, values = _control(d, t2)
    assert level == OK and values["achieved_rate_hz"] == "2.5"
    d.clock_jumped(ClockJump(-30 * NS, t2 - 30 * NS, "/clock"))
    d.chunk_published(t2 - 30 * NS + NS // 10, 0.01, stamp_ns=t2 - NS)  # the chunk in flight at the jump
    d.tick_waiting("camera slot 0: no image since the clock jumped")
    level, _, values = _control(d, t2 - 30 * NS + NS // 5)
    assert values["chunks_in_window"] == "0" and values["clock_jumps_back"] == "1"  # its stamp is of the other timeline
    inputs = d.report(t2 - 30 * NS + NS // 5, {"skipped_after_clock_jump": 3})[1]
    assert inputs.level == OK and "waiting for inputs after the clock jump" in inputs.message


def test_peak_kv_and_live_requests_are_what_was_held_at_once() -> None:
    m = KVCacheManager(KVPool(2, 1, 4, 100), reserve_tokens=10)
    per_token = m.pool.bytes_per_token
    prefix = m.new_prefix(8, frame_seq=0, stamp_ns=0)
    requests = [m.submit("language", prefix, [1, 2], 3, 0, 0).request for _ in range(3)]
    m.release(prefix)
    for r in requests:
        m.finish(r, "eos")  # all gone before anyone looks at stats()
    assert m.stats().used_bytes == 0 and m.stats().live_requests == 0
    assert m.take_peaks() == ((8 + 3 * 5) * per_token, 3)
    assert m.take_peaks() == (0, 0)  # measured again from what is held now


def test_a_last_chunk_from_a_later_timeline_replans_at_once() -> None:
    assert not replan_due(100.1, 100.0, "n_action_steps", 2, 0.2)
    assert replan_due(70.0, 100.0, "n_action_steps", 2, 0.2)  # the clock went back past the last chunk


def test_episodes_are_made_when_they_start() -> None:
    episodes = HeldOutEpisodes(5, 999_995, "typed", ["", "wave"])
    assert len(episodes) == 999_995
    assert episodes[0] == EpisodeSpec.for_family(5, "typed") and episodes[999_992] == EpisodeSpec.for_family(999_997, "typed")
    assert episodes[1] == EpisodeSpec.with_instruction(6, "wave") and episodes[-1] == episodes[999_994]
    with pytest.raises(IndexError):
        episodes[999_995]  # noqa: B018
    with pytest.raises(ValueError, match="evaluation seeds"):
        HeldOutEpisodes(5, 999_996)
    with pytest.raises(ValueError):
        HeldOutEpisodes(0, 3, "no such family")
