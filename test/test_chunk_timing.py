"""Chunk timing without a follower: the alignment rules, the RTC guide between consecutive chunks, the
execution horizon and the runtime's use of them."""

from __future__ import annotations

import numpy as np
import pytest
from oxygen_ros.runtime import PolicyRuntime, RuntimeConfig
from oxygen_ros.runtime.alignment import ChunkTooLate, align_chunk, delay_steps
from oxygen_ros.runtime.chunking import RealTimeChunker, RtcSettings

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


def test_n_action_steps_resolution_and_validation() -> None:
    rt = _runtime(horizon=8)
    assert rt.n_action_steps == 8
    rt.checkpoint_n_action_steps = 5
    assert rt.n_action_steps == 5
    rt.config.n_action_steps = 3
    assert rt.n_action_steps == 3
    for bad in (dict(n_action_steps=11), dict(replan="sometimes"), dict(time_alignment="late"),
                dict(rtc_beta=-1.0), dict(rtc_beta=float("nan")), dict(rtc_schedule="cosine"),
                dict(rtc_prefix_attention_horizon=-2)):
        with pytest.raises(ValueError):
            RuntimeConfig(**bad).validate()
