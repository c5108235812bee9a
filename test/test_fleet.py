"""One engine serving several robots: each robot's chunk and text equal a one-robot engine's, the KV reserve
per robot, robots with their own rates, and robots without usable inputs skipped."""

from __future__ import annotations

import pytest
import torch

from compiler_needed import needs_compiler
from engine_fixtures import decode_alone, make_frame, tiny_model
from oxygen_ros.engine import Engine, TextTask
from oxygen_ros.engine.fleet import FleetSchedule, serve
from oxygen_ros.model.backends.compiled import FusedActionSampler

LANGUAGE = TextTask("language", continuation=(11, 12, 13), every_n_frames=1, max_tokens=6)
ROBOTS = ("left", "right", "third")
CAMERAS = ((True, False, True), (True, True, True), (False, True, False))  # ragged prefixes: 1 to 3 images


def fleet_frames(cfg, seq: int = 0) -> dict:
    return {n: make_frame(cfg, 10 * i + seq, prompt_len=4 + 5 * i, cameras=CAMERAS[i]) for i, n in enumerate(ROBOTS)}


def fleet_engine(model, tasks=(), **kw) -> Engine:
    engine = Engine(model, tasks, kv_budget_bytes=kw.pop("kv_budget_bytes", 8 << 20), **kw)
    for name in ROBOTS:
        engine.add_robot(name)
    return engine


def test_each_robots_chunk_equals_a_one_robot_engine() -> None:
    model = tiny_model(seed=3)
    engine = fleet_engine(model)
    frames = fleet_frames(model.config)
    noise = {n: torch.randn(model.config.action_horizon, model.config.action_dim) for n in ROBOTS}
    results = engine.tick_many(frames, noise)
    assert len({r.prefix_tokens for r in results.values()}) == 3  # really ragged
    for name in ROBOTS:
        alone = Engine(model, kv_budget_bytes=8 << 20).tick(frames[name], noise[name])
        torch.testing.assert_close(torch.from_numpy(results[name].actions), torch.from_numpy(alone.actions),
                                   rtol=1e-5, atol=1e-5)
        assert results[name].robot == name
    assert engine.kv.stats().used_bytes == 0 and engine.kv.stats().live_prefixes == 0


def test_each_robot_has_its_own_noise_and_schedule() -> None:
    model = tiny_model(seed=4)
    engine = fleet_engine(model, [TextTask("memory", (5, 6), every_n_frames=2, max_tokens=2)], ignore_eos=True)
    engine.robot("left").generator.manual_seed(7)
    engine.robot("right").generator.manual_seed(7)
    frames = fleet_frames(model.config)
    frames["right"] = frames["left"]
    first = engine.tick_many({n: frames[n] for n in ("left", "right")})
    assert (first["left"].actions == first["right"].actions).all()  # same frame, same seed: same chunk
    assert [t for _, t in first["left"].started] == ["memory"]
    second = engine.tick_many({"left": frames["left"], "third": frames["third"]})
    assert second["left"].started == [] and [t for _, t in second["third"].started] == ["memory"]


def test_text_of_every_robot_in_one_decode_batch_equals_decoding_alone() -> None:
    model = tiny_model(seed=5)
    engine = fleet_engine(model, [LANGUAGE], ignore_eos=True)
    frames = fleet_frames(model.config)
    results = engine.tick_many(frames)
    origin = {rid: name for name, r in results.items() for rid, _ in r.started}
    events = engine.drain()
    assert engine.stats().last_decode_batch == 3 or engine.stats().decode_steps == LANGUAGE.max_tokens
    tokens: dict[int, list[int]] = {}
    for e in events:
        assert e.robot == origin[e.request_id]
        tokens.setdefault(e.request_id, []).extend(e.token_ids)
    for rid, name in origin.items():
        assert tokens[rid] == decode_alone(model, frames[name], list(LANGUAGE.continuation), LANGUAGE.max_tokens)
    assert engine.robot("left").tokens == LANGUAGE.max_tokens


def test_one_robots_text_never_blocks_another_robots_prefill() -> None:
    model = tiny_model(seed=6)
    long_text = TextTask("story", continuation=(9,), max_tokens=200)
    per_token = engine_token_bytes(model)
    # Room for the reserves of two robots, one arena prefix and little more: text fills the arena at once.
    budget = per_token * (3 * model.config.max_prefix_tokens + 300)
    engine = Engine(model, [long_text], kv_budget_bytes=budget, ignore_eos=True)
    engine.add_robot("b")
    cfg = model.config
    a = engine.tick(make_frame(cfg, 0))
    assert a.started  # robot "" holds the arena with its text
    for seq in range(1, 4):
        engine.decode_step()
        got = engine.tick_many({"": make_frame(cfg, seq), "b": make_frame(cfg, 100 + seq, cameras=(True, True, True))})
        assert got["b"].actions is not None and got[""].actions is not None  # both still get their chunks
        # Waiting text forks only from its own robot's frames.
        started_b = {rid for rid, _ in got["b"].started}
        assert all(engine._owner.get(rid) == "b" for rid in started_b)
    assert all(engine._owner[r.id] in ("", "b") for r in engine.kv.running())


def engine_token_bytes(model) -> int:
    b = model.config.backbone
    return 2 * b.depth * b.num_kv_heads * b.head_dim * model.dtype.itemsize


def test_unknown_robot_and_duplicate_names_are_refused() -> None:
    model = tiny_model(seed=7)
    engine = fleet_engine(model)
    with pytest.raises(ValueError, match="unknown robot"):
        engine.tick_many({"nobody": make_frame(model.config, 0)})
    with pytest.raises(ValueError, match="unique"):
        engine.add_robot("left")
    assert engine.kv.stats().live_prefixes == 0


def test_schedule_serves_due_robots_at_their_own_rates_and_skips_missing_inputs() -> None:
    model = tiny_model(seed=8)
    engine = fleet_engine(model)
    schedule = FleetSchedule({"left": 0.1, "right": 0.2, "third": 0.1}, phases={"third": 0.05})
    frames = fleet_frames(model.config)
    served: dict[str, int] = {n: 0 for n in ROBOTS}
    skipped: dict[str, int] = {n: 0 for n in ROBOTS}

    def frame_of(name: str):
        return "camera image is 2.0 s old" if name == "right" and served["right"] >= 2 else frames[name]

    now = 0.0
    while now < 1.0 - 1e-9:
        tick = serve(engine, schedule, frame_of, now)
        for name in tick.results:
            served[name] += 1
        for name in tick.skipped:
            skipped[name] += 1
        assert tick.next_deadline_s > now
        now = round(now + 0.05, 6)
    assert served["left"] == 10 and served["third"] == 10  # 0.0 .. 0.9 and 0.05 .. 0.95
    assert served["right"] == 2 and skipped["right"] == 3  # 0.0, 0.2 served; 0.4, 0.6, 0.8 skipped
    assert engine.robot("right").chunks == 2 and engine.robot("left").chunks == 10


def test_a_late_robot_drops_missed_ticks() -> None:
    schedule = FleetSchedule({"a": 0.1})
    assert schedule.due(0.0) == ["a"]
    schedule.served("a", 0.35)  # the engine was busy: ticks 0.1 .. 0.3 passed
    assert schedule.next_deadline() == pytest.approx(0.4)


@needs_compiler
def test_compiled_batch_equals_the_eager_batch() -> None:
    model = tiny_model(seed=9)
    sampler = FusedActionSampler(model)
    engine = fleet_engine(model, action_sampler=sampler)
    eager = fleet_engine(model)
    for seq in range(2):  # a second call with other lengths runs the same compiled code
        frames = fleet_frames(model.config, seq)
        noise = {n: torch.randn(model.config.action_horizon, model.config.action_dim) for n in ROBOTS}
        fused = engine.tick_many(frames, noise)
        plain = eager.tick_many(frames, noise)
        two = engine.tick_many({n: frames[n] for n in ROBOTS[:2]}, noise)
        for name in ROBOTS:
            torch.testing.assert_close(torch.from_numpy(fused[name].actions), torch.from_numpy(plain[name].actions),
                                       rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(torch.from_numpy(two["left"].actions), torch.from_numpy(plain["left"].actions),
                                   rtol=1e-4, atol=1e-4)
    assert sampler.fused, sampler.failure
