"""The engine and its modes: OxyGen text equals decoding alone, actions equal across modes, no leaks,
budget exhaustion without exceptions."""

from __future__ import annotations

import time

import pytest
import torch

from engine_fixtures import decode_alone, make_frame, tiny_model
from oxygen_ros.engine import MODES, DeadlinePolicy, Engine, StepCostModel, TextTask, make_runner
from oxygen_ros.engine.lanes import Lane

LANGUAGE = TextTask("language", continuation=(11, 12, 13), every_n_frames=1, max_tokens=7)
MEMORY = TextTask("memory", continuation=(21, 22), every_n_frames=3, max_tokens=12)


def collect(events) -> dict[int, list[int]]:
    tokens: dict[int, list[int]] = {}
    for e in events:
        tokens.setdefault(e.request_id, []).extend(e.token_ids)
    return tokens


def test_oxygen_text_batched_across_frames_equals_each_request_alone() -> None:
    model = tiny_model(seed=1)
    engine = Engine(model, [LANGUAGE, MEMORY], kv_budget_bytes=8 << 20, ignore_eos=True)
    runner = make_runner("oxygen", engine, tokens_per_frame=2)
    frames = [make_frame(model.config, i) for i in range(9)]
    events, origin = [], {}
    for frame in frames:
        report = runner.frame(frame)
        for rid, task in report.tick.started:
            origin[rid] = (frame, task)
        events += report.events
        # Several requests from different frames are live at once: the batch really mixes frames.
    events += engine.drain()
    produced = collect(events)
    assert len(origin) == 9 + 3
    tasks = {t.name: t for t in (LANGUAGE, MEMORY)}
    for rid, (frame, task) in origin.items():
        spec = tasks[task]
        expected = decode_alone(model, frame, list(spec.continuation), spec.max_tokens)
        assert produced[rid] == expected, f"request {rid} ({task}) from frame {frame.frame_seq}"
    assert engine.kv.stats().used_bytes == 0


def test_batches_really_mix_frames_and_lengths() -> None:
    model = tiny_model(seed=2)
    engine = Engine(model, [LANGUAGE], kv_budget_bytes=8 << 20, ignore_eos=True)
    runner = make_runner("oxygen", engine, tokens_per_frame=1)
    batches = []
    for i in range(5):
        runner.frame(make_frame(model.config, i))
        batches.append(engine.stats().last_decode_batch)
    assert max(batches) >= 4  # requests from 4+ frames advanced in one call
    frames_live = {r.frame_seq for r in engine.kv.running()}
    assert len(frames_live) >= 3


def test_action_chunks_identical_across_modes() -> None:
    model = tiny_model(seed=3)
    frames = [make_frame(model.config, i) for i in range(3)]
    noises = [torch.randn(model.config.action_horizon, model.config.action_dim, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    chunks = {}
    for mode in MODES:
        engine = Engine(model, [LANGUAGE, MEMORY], kv_budget_bytes=8 << 20, ignore_eos=True)
        runner = make_runner(mode, engine, tokens_per_frame=1)
        chunks[mode] = [runner.frame(f, n).tick.actions for f, n in zip(frames, noises)]
        runner.close()
        assert engine.kv.stats().used_bytes == 0
    for mode in MODES:
        for got, ref in zip(chunks[mode], chunks["action_only"]):
            got, ref = torch.from_numpy(got), torch.from_numpy(ref)
            if mode == "parallel" and torch.get_num_threads() > 1:
                # its worker has half the threads: a product split over fewer threads may round differently
                torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
            else:
                assert torch.equal(got, ref), mode


def test_parallel_workers_share_the_callers_threads() -> None:
    """A new thread starts with torch's process-wide thread count, which the last set_num_threads of any
    thread decides (here a one-thread lane's, as test_overlap leaves it); the parallel mode's two workers
    take half the caller's count each, whatever ran before."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        lane = Lane("probe", threads=1)
        lane.run(lambda: None)
        lane.close()
        runner = make_runner("parallel", Engine(tiny_model(seed=3), [LANGUAGE], kv_budget_bytes=8 << 20))
        try:
            assert runner._pool.submit(torch.get_num_threads).result() == max(1, torch.get_num_threads() // 2)
        finally:
            runner.close()
    finally:
        torch.set_num_threads(before)


def test_text_identical_across_text_modes() -> None:
    model = tiny_model(seed=4)
    frames = [make_frame(model.config, i) for i in range(4)]
    texts = {}
    for mode in ("sequential", "parallel", "shared", "oxygen"):
        engine = Engine(model, [LANGUAGE, MEMORY], kv_budget_bytes=8 << 20, ignore_eos=True)
        runner = make_runner(mode, engine, tokens_per_frame=3)
        events = []
        for f in frames:
            events += runner.frame(f).events
        events += engine.drain()
        if mode == "parallel":
            events += runner.text_engine.drain()  # type: ignore[attr-defined]
        runner.close()
        streams = {}
        for e in events:
            streams.setdefault((e.frame_seq, e.task), []).extend(e.token_ids)
        texts[mode] = streams
    assert texts["sequential"] == texts["shared"] == texts["oxygen"] == texts["parallel"]
    assert len(texts["oxygen"]) == 4 + 2


def test_thousand_frames_leave_no_kv_in_use() -> None:
    model = tiny_model(seed=5, num_denoise_steps=1, action_horizon=2)
    tasks = [TextTask("language", (5, 6), 1, 4), TextTask("memory", (7,), 2, 9)]
    engine = Engine(model, tasks, kv_budget_bytes=2 << 20, ignore_eos=False)
    runner = make_runner("oxygen", engine, tokens_per_frame=1)
    frame = make_frame(model.config, 0, prompt_len=4, cameras=(True, False, False))
    peak_live = 0
    for i in range(1000):
        frame.frame_seq, frame.stamp_ns = i, i * 1000
        runner.frame(frame)
        peak_live = max(peak_live, engine.live_requests)
    assert peak_live >= 5
    runner.close()
    stats = engine.kv.stats()
    assert stats.used_bytes == 0 and stats.live_prefixes == 0 and stats.live_requests == 0


@pytest.mark.parametrize("admission", ["wait", "refuse"])
def test_budget_exhaustion_waits_or_refuses_and_actions_keep_coming(admission: str) -> None:
    model = tiny_model(seed=6)
    cfg = model.config
    per_token = cfg.kv_bytes_per_token(4)
    # Room for the action reserve plus about one retained prefix and a little text.
    budget = per_token * (cfg.max_prefix_tokens + 2 * (2 * cfg.tokens_per_image + 20) + 40)
    engine = Engine(model, [TextTask("language", (5, 6, 7), 1, 25)], kv_budget_bytes=budget, admission=admission, max_waiting=2)
    runner = make_runner("oxygen", engine, tokens_per_frame=1)
    refused, waiting, started = [], [], []
    for i in range(12):
        report = runner.frame(make_frame(cfg, i))
        assert report.tick.actions.shape == (cfg.action_horizon, cfg.action_dim)
        refused += report.tick.refused
        waiting += report.tick.waiting
        started += report.tick.started
    assert started, "some text must still run"
    if admission == "refuse":
        assert refused and not waiting
        assert all(reason in ("no_kv_memory", "prefix_not_shareable") for _, _, reason in refused)
    else:
        assert waiting
        assert engine.kv.stats().waiting <= 2
    runner.close()
    assert engine.kv.stats().used_bytes == 0


class FakeClock:
    """Advances 10 ms every time it is read, so a decode step 'costs' a known amount."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 0.01
        return self.now


def test_deadline_policy_stops_at_the_deadline_and_learns_step_cost() -> None:
    model = tiny_model(seed=7)
    engine = Engine(model, [TextTask("language", (5,), 1, 50)], kv_budget_bytes=8 << 20, ignore_eos=True)
    engine.tick(make_frame(model.config, 0))
    clock = FakeClock()
    policy = DeadlinePolicy(StepCostModel(margin=1.0), clock=clock)
    assert policy.run(engine, deadline=clock.now - 1.0) == []  # no slack: no step
    events = policy.run(engine, deadline=clock.now + 0.1)
    # Each step reads the clock three times (30 ms of which 10 ms is measured as its cost), so the first
    # steps fit and the policy stops once now + predicted cost passes the deadline, with text still live.
    assert policy.cost.predict(1) == pytest.approx(0.01)
    assert 2 <= len(events) <= 4
    assert engine.live_requests == 1
    assert clock.now <= 100.0 + 1.0 + 0.1 + 0.04


def test_deadline_policy_recovers_from_one_slow_step() -> None:
    """One step far slower than the rest must not stop text: the slack of the starved calls is banked until a
    step fits, and that step re-measures the cost."""
    model = tiny_model(seed=7)
    engine = Engine(model, [TextTask("language", (5,), 1, 50)], kv_budget_bytes=8 << 20, ignore_eos=True)
    engine.tick(make_frame(model.config, 0))
    clock = FakeClock()
    policy = DeadlinePolicy(StepCostModel(margin=1.0), clock=clock)
    policy.cost.observe(1, 0.5)  # one outlier: the estimate is now far above any call's slack
    starved = 0
    while not policy.run(engine, deadline=clock.now + 0.05):  # 50 ms of slack per call, 40 ms left when read
        starved += 1
        assert starved < 20, "text starved"
    assert 9 <= starved <= 13  # about 0.5 s / 40 ms of banked slack, not forever
    assert policy.banked_s == 0.0 and policy.cost.predict(1) < 0.5  # the step re-measured the cost
    assert policy.run(engine, deadline=clock.now + 1.0)  # and steps fit again without banking
    assert engine.live_requests == 1
    # A few short calls between calls that decode never spend banked time past their deadline.
    policy.cost.observe(1, 0.5)
    for _ in range(policy.patience - 1):
        assert policy.run(engine, deadline=clock.now + 0.05) == []
    assert policy.run(engine, deadline=clock.now + 1.0) and policy.starved_calls == 0 and policy.banked_s == 0.0


def test_eos_finishes_a_request() -> None:
    model = tiny_model(seed=8)
    frame = make_frame(model.config, 0)
    alone = decode_alone(model, frame, [5, 6], 6)
    eos_model_cfg_eos = alone[2]  # pretend the third greedy token is EOS
    model.config = model.config.replace(eos_token_id=eos_model_cfg_eos)
    engine = Engine(model, [TextTask("language", (5, 6), 1, 6)], kv_budget_bytes=8 << 20)
    engine.tick(frame)
    events = engine.drain()
    assert events[-1].final and events[-1].finish_reason == "eos"
    assert [t for e in events for t in e.token_ids] == alone[: alone.index(eos_model_cfg_eos) + 1]
