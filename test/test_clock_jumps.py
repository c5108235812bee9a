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
from oxygen_ros.runtime.clock_jumps import ClockJump, MonotonicCheck
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
        watch.check(node.get_clock().now().nanoseconds)  # ROS time is active: the monotonic check stays out
        assert [(j.delta_ns, j.now_ns, j.back) for j in seen] == [
            (-30 * NS - NS // 100, 70 * NS, True), (60 * NS - 5 * NS // 10, 130 * NS, False), (-NS // 1000, 130 * NS - NS // 1000, True)]
        assert seen[0].describe() == "clock jumped back 30.010 s (100.010 s -> 70.000 s, /clock)"
        watch.close()
        executor.shutdown()
        node.destroy_node()
        driver.destroy_node()
    finally:
        rclpy.shutdown()


def test_the_monotonic_check_finds_a_stepped_system_clock() -> None:
    check = MonotonicCheck(forward_s=1.0, back_s=0.01)
    assert check.check(1000 * NS, 5 * NS) is None  # the first reading
    assert check.check(1000 * NS + NS // 5, 5 * NS + NS // 5) is None  # both moved 0.2 s
    jump = check.check(990 * NS, 5 * NS + NS // 2)  # the clock went back while 0.3 s passed
    assert jump is not None and jump.back and jump.delta_ns == -(10 * NS + NS // 5 + 3 * NS // 10)
    assert check.check(990 * NS + NS // 2, 6 * NS) is None
    jump = check.check(1100 * NS, 6 * NS + NS // 10)
    assert jump is not None and not jump.back and "forward" in jump.describe()


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
