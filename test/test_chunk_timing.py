"""Chunk timing without a follower: the alignment rules, the RTC guide between consecutive chunks, the
execution horizon and the runtime's use of them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oxygen_ros.runtime import PolicyRuntime, RuntimeConfig, RuntimeLoadError
from oxygen_ros.runtime.alignment import ChunkTooLate, align_chunk, aligned_trajectory, delay_steps, replan_due
from oxygen_ros.runtime.chunking import RealTimeChunker, RtcSettings
from oxygen_ros.runtime.trajectory import JointLimits, trajectory_points
from oxygen_ros.sim.follower import TrajectoryFollower, TrajectoryRejected

STEP = 0.1
MS = 1_000_000


def test_delay_steps_rounds_up_and_tolerates_jitter() -> None:
    assert delay_steps(0.0, STEP) == 0
    assert delay_steps(0.05, STEP) == 1
    assert delay_steps(0.1, STEP) == 1
    assert delay_steps(0.1 + 1e-12, STEP) == 1
    assert delay_steps(0.25, STEP) == 3
    with pytest.raises(ValueError):
        delay_steps(0.1, 0.0)


def test_stamp_alignment_keeps_the_observation_time() -> None:
    t = align_chunk(10, STEP, stamp_ns=5_000 * MS, latency_s=0.25, n_action_steps=4, mode="stamp")
    assert t.stamp_ns == 5_000 * MS
    assert list(t.indices) == list(range(7))  # 3 past on arrival + 4 to execute
    assert t.times_s == pytest.approx([0.1 * (i + 1) for i in range(7)])
    whole = align_chunk(10, STEP, 5_000 * MS, 0.25, None, "stamp")
    assert whole.last == 10


def test_drop_alignment_drops_the_past_actions_and_starts_on_arrival() -> None:
    t = align_chunk(10, STEP, stamp_ns=5_000 * MS, latency_s=0.25, n_action_steps=4, mode="drop")
    assert t.stamp_ns == 0
    assert list(t.indices) == [3, 4, 5, 6]
    # Each kept action at its own instant, measured from arrival: (i + 1)·step − latency, all ≥ one step ahead.
    assert t.times_s == pytest.approx([0.15, 0.25, 0.35, 0.45])
    assert align_chunk(10, STEP, 0, 0.0, None, "drop").times_s[0] == pytest.approx(STEP)


def test_naive_alignment_replays_from_the_first_action() -> None:
    t = align_chunk(10, STEP, stamp_ns=5_000 * MS, latency_s=0.25, n_action_steps=4, mode="none")
    assert (t.stamp_ns, list(t.indices)) == (0, [0, 1, 2, 3])
    assert t.times_s == pytest.approx([0.1, 0.2, 0.3, 0.4])


def test_a_chunk_later_than_its_horizon_sends_nothing() -> None:
    for mode in ("stamp", "drop"):
        with pytest.raises(ChunkTooLate):
            align_chunk(5, STEP, 0, latency_s=0.55, mode=mode)
    assert len(align_chunk(5, STEP, 0, latency_s=0.55, mode="none").times_s) == 5  # naive never notices
    with pytest.raises(ValueError, match="time alignment"):
        align_chunk(5, STEP, 0, 0.1, mode="later")


def test_guide_shifts_the_previous_chunk_to_the_new_observation_time() -> None:
    chunker = RealTimeChunker(RtcSettings(enabled=True, beta=3.0, schedule="linear"))
    previous = np.arange(10 * 2, dtype=np.float32).reshape(10, 2)
    assert chunker.guide(0, STEP, 0.1) is None  # nothing to continue yet
    chunker.record(1_000 * MS, previous)
    guide = chunker.guide(1_300 * MS, STEP, latency_s=0.2)  # 3 steps later, 2 steps of delay
    assert guide is not None and guide.beta == 3.0
    np.testing.assert_array_equal(guide.target[:7].numpy(), previous[3:])
    assert guide.target[7:].abs().sum() == 0
    assert guide.weights[:2].tolist() == [1.0, 1.0]
    assert guide.weights[7:].abs().sum() == 0  # past the overlap
    assert bool((guide.weights[2:7].diff() < 0).all())
    limited = RealTimeChunker(RtcSettings(enabled=True, prefix_attention_horizon=4))
    limited.record(0, previous)
    assert limited.guide(100 * MS, STEP, 0.0).weights[4:].abs().sum() == 0
    assert chunker.guide(2_100 * MS, STEP, 0.1) is None  # the previous chunk has run out
    assert RealTimeChunker(RtcSettings(enabled=False)).guide(0, STEP, 0.1) is None
    with pytest.raises(ValueError, match="rtc_schedule"):
        RtcSettings(schedule="cosine")


def _runtime(**changes) -> PolicyRuntime:
    config = RuntimeConfig(model_preset="tiny", prompt_format="oxygen", tasks=[], engine_mode="action_only", **changes)
    return PolicyRuntime.load(config)


def _frame(runtime: PolicyRuntime, stamp_ns: int):
    s = runtime.image_size
    image = np.full((s, s, 3), 100, dtype=np.uint8)
    return runtime.make_frame([image], None, "pick the cube", stamp_ns)


def test_runtime_guides_each_chunk_toward_the_previous_one() -> None:
    plain, guided = _runtime(seed=3), _runtime(seed=3, rtc=True, rtc_beta=20.0)
    first = [rt.step(_frame(rt, 0), STEP, 0.2).tick.actions for rt in (plain, guided)]
    np.testing.assert_array_equal(first[0], first[1])  # nothing to continue on the first chunk
    second = [rt.step(_frame(rt, 100 * MS), STEP, 0.2).tick.actions for rt in (plain, guided)]
    gap = [np.abs(s[:2] - first[0][1:3]).max() for s in second]
    assert gap[1] < 0.2 * gap[0], gap
    unguided = plain.step(_frame(plain, 200 * MS)).tick.actions  # no step period: plain sampling
    guided.forget_chunk()  # e.g. the second chunk was never published: nothing to continue
    np.testing.assert_array_equal(guided.step(_frame(guided, 200 * MS), STEP, 0.2).tick.actions, unguided)


def test_step_many_guides_each_robot_with_its_own_step_period() -> None:
    rt = _runtime(seed=3, rtc=True, rtc_beta=20.0)
    rt.add_robot("slow")
    periods = {"": STEP, "slow": 2 * STEP}
    done = rt.step_many({name: _frame(rt, 0) for name in periods}, periods, 0.1)
    # 200 ms later: two steps of the fast robot, one of the slow one; then one period for both (the float form).
    for stamp_ms, step_period, shifts in ((200, periods, {"": 2, "slow": 1}), (400, STEP, {"": 2, "slow": 2})):
        frames = {name: _frame(rt, stamp_ms * MS) for name in periods}
        previous = {name: result.tick.actions for name, result in done.items()}
        done = rt.step_many(frames, step_period, {"": 0.1, "slow": 0.1})
        for name, shift in shifts.items():
            kept = len(previous[name]) - shift
            np.testing.assert_array_equal(frames[name].guide.target[:kept].numpy(), previous[name][shift:])


def test_n_action_steps_resolution_and_validation() -> None:
    rt = _runtime(horizon=8)
    assert rt.n_action_steps == 8
    rt.checkpoint_info = dataclasses.replace(rt.checkpoint_info, n_action_steps=5)  # as a LeRobot config records it
    assert rt.n_action_steps == 5
    rt.config.n_action_steps = 3
    assert rt.n_action_steps == 3
    for bad in (dict(n_action_steps=11), dict(replan="sometimes"), dict(time_alignment="late"),
                dict(rtc_beta=-1.0), dict(rtc_beta=float("nan")), dict(rtc_schedule="cosine"),
                dict(rtc_prefix_attention_horizon=-2)):
        with pytest.raises(ValueError):
            RuntimeConfig(horizon=10, **bad).validate()
    # horizon 0 = the model's chunk length, known once it is loaded: more steps than that is refused there
    with pytest.raises(RuntimeLoadError, match="n_action_steps 99 is more than the chunk length"):
        PolicyRuntime.load(RuntimeConfig(model_preset="tiny", n_action_steps=99, num_threads=1))


# ------------------------------------------------------------------ against the simulator's follower
JOINTS = ("a", "b")
OBS_S, LATENCY = 1.0, 0.25


def _chunk(horizon: int = 10) -> np.ndarray:
    """Action i commands joint a to i + 1 and joint b to -(i + 1); a third, uncommanded dimension."""
    i = np.arange(1, horizon + 1, dtype=np.float64)
    return np.stack([i, -i, np.zeros_like(i)], axis=1)


def _follow(mode: str, n_action_steps: int | None = None, latency: float = LATENCY) -> TrajectoryFollower:
    trajectory, _ = aligned_trajectory(_chunk(), JOINTS, STEP, JointLimits(), int(OBS_S * 1e9), latency, n_action_steps, mode)
    follower = TrajectoryFollower(JOINTS, np.zeros(2), np.full(2, 100.0), now_s=OBS_S)
    follower.command(trajectory, now_s=OBS_S + latency)  # received when the chunk is sent
    return follower


def test_follower_executes_each_action_at_its_own_time_with_stamp_and_drop() -> None:
    for mode in ("stamp", "drop"):
        follower = _follow(mode)
        for i in range(3, 10):  # actions 0..2 were due before the chunk arrived
            np.testing.assert_allclose(follower.setpoint(OBS_S + (i + 1) * STEP), [i + 1, -(i + 1)], err_msg=mode)
        # Just after arrival the setpoint heads from where the arm is to action 3, not back to actions 0..2.
        mid = follower.setpoint(OBS_S + LATENCY + 0.01)
        assert 0 < mid[0] < 4
    stamp, drop = _follow("stamp"), _follow("drop")
    for t in np.linspace(OBS_S + 0.4, OBS_S + 1.2, 9):
        np.testing.assert_allclose(stamp.setpoint(t), drop.setpoint(t))


def test_follower_replays_past_actions_without_alignment() -> None:
    follower = _follow("none")
    for i in range(10):  # every action one latency late: the arm replays the past
        np.testing.assert_allclose(follower.setpoint(OBS_S + LATENCY + (i + 1) * STEP), [i + 1, -(i + 1)])


def test_follower_holds_after_the_execution_horizon() -> None:
    for mode in ("stamp", "drop", "none"):
        follower = _follow(mode, n_action_steps=4)
        last = 4 if mode == "none" else 3 + 4  # n actions executed after arrival
        np.testing.assert_allclose(follower.setpoint(OBS_S + 5.0), [last, -last], err_msg=mode)


def test_a_chunk_the_follower_would_reject_is_not_sent() -> None:
    late = 1.05  # the whole 10-step chunk lies in the past on arrival
    with pytest.raises(ChunkTooLate):
        aligned_trajectory(_chunk(), JOINTS, STEP, JointLimits(), int(OBS_S * 1e9), late, None, "stamp")
    everything, _ = trajectory_points(_chunk(), JOINTS, STEP, start_time_ns=int(OBS_S * 1e9))
    follower = TrajectoryFollower(JOINTS, np.zeros(2), np.full(2, 100.0), now_s=OBS_S)
    with pytest.raises(TrajectoryRejected):
        follower.command(everything, now_s=OBS_S + late)


def test_replan_every_tick_or_every_n_steps() -> None:
    assert replan_due(0.3, 0.2, "tick", 4, STEP)
    assert replan_due(0.3, None, "n_action_steps", 4, STEP)
    assert not replan_due(0.5, 0.2, "n_action_steps", 4, STEP)
    assert replan_due(0.6, 0.2, "n_action_steps", 4, STEP, slack_s=1e-9)
    with pytest.raises(ValueError):
        replan_due(0.6, 0.2, "sometimes", 4, STEP)
