"""One batched prefill over several robots' ragged prefixes: each robot's KV and chunk equal its own one-robot
prefill's within float rounding in both prefix attention modes, exact mode bit for bit, robots absent from
the tick untouched, and no KV left allocated when the batch fails."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine_fixtures import make_frame, model_with_norms
from oxygen_ros.engine import Engine, FrameInput, TextTask
from oxygen_ros.model.network.batched_prefill import prefill_batch

ROBOTS = ("left", "right", "third")
MODES = ("causal_text", "bidirectional")
PROMPTS = (4, 9, 14)
CAMERA_SETS = {
    "ragged": ((True, False, True), (True, True, True), (False, True, False)),  # 1 to 3 images
    "same": ((True, True, False),) * 3,  # the image block needs no mask
    "none": ((False, False, False), (True, False, False), (False, False, False)),  # prompt-only prefixes
}


def fleet(model, tasks=(), **kw) -> Engine:  # noqa: ANN001
    engine = Engine(model, tasks, kv_budget_bytes=8 << 20, **kw)
    for name in ROBOTS:
        engine.add_robot(name)
    return engine


def frames_of(model, cameras, seq: int = 0) -> dict[str, FrameInput]:  # noqa: ANN001
    return {n: make_frame(model.config, 10 * i + seq, prompt_len=PROMPTS[i], cameras=cameras[i])
            for i, n in enumerate(ROBOTS)}


def alone_kv(model, frame: FrameInput) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # noqa: ANN001
    b, cfg = model.config.backbone, model.config
    k = torch.zeros(b.depth, cfg.max_prefix_tokens, b.num_kv_heads, b.head_dim, dtype=model.dtype)
    v = torch.zeros_like(k)
    out = model.prefill(frame.images, frame.image_mask, frame.prompt_tokens, k, v)
    return k[:, :out.length], v[:, :out.length], out.last_hidden


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cameras", CAMERA_SETS)
def test_batched_prefill_equals_each_robots_own_prefill(mode: str, cameras: str) -> None:
    model = model_with_norms(mode, seed=11)
    engine = fleet(model)
    frames = frames_of(model, CAMERA_SETS[cameras])
    prefixes, seconds = engine.prefill_many(frames)
    try:
        assert len({p.length for p in prefixes.values()}) == 3  # really ragged
        assert len(set(seconds.values())) == 1  # one call: each robot reports its time
        pool = engine.kv.pool
        for name, frame in frames.items():
            k, v, _ = alone_kv(model, frame)
            prefix = prefixes[name]
            assert prefix.length == k.shape[1] == engine.robot(name).prefix_tokens
            torch.testing.assert_close(pool.view_k(prefix.extent), k, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(pool.view_v(prefix.extent), v, rtol=1e-5, atol=1e-5)
    finally:
        for prefix in prefixes.values():
            engine.kv.release(prefix)
    assert engine.kv.stats().used_bytes == 0 and engine.kv.stats().live_prefixes == 0


@pytest.mark.parametrize("mode", MODES)
def test_the_last_hidden_state_of_each_prefix_equals_its_own(mode: str) -> None:
    model = model_with_norms(mode, seed=12)
    frames = list(frames_of(model, CAMERA_SETS["ragged"]).values())
    b, cfg = model.config.backbone, model.config
    ks = [torch.full((b.depth, cfg.max_prefix_tokens, b.num_kv_heads, b.head_dim), float("nan")) for _ in frames]
    outs = prefill_batch(model, [(f.images, f.image_mask, f.prompt_tokens) for f in frames], ks, [k.clone() for k in ks])
    for frame, out, k in zip(frames, outs, ks):
        ek, _, hidden = alone_kv(model, frame)
        assert out.length == ek.shape[1] and not k[:, :out.length].isnan().any()
        assert k[:, out.length:].isnan().all()  # nothing written past the prefix
        torch.testing.assert_close(out.last_hidden, hidden, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_each_chunk_and_text_equal_a_one_robot_engine(mode: str) -> None:
    model = model_with_norms(mode, seed=13)
    task = TextTask("language", continuation=(11, 12), max_tokens=4)
    engine = fleet(model, [task], ignore_eos=True)
    frames = frames_of(model, CAMERA_SETS["ragged"])
    noise = {n: torch.randn(model.config.action_horizon, model.config.action_dim) for n in ROBOTS}
    results = engine.tick_many(frames, noise)
    assert len({r.prefill_s for r in results.values()}) == 1
    assert engine.stats().last_prefill_s == pytest.approx(results["left"].prefill_s, rel=0.5)
    tokens: dict[str, list[int]] = {}
    origin = {rid: n for n, r in results.items() for rid, _ in r.started}
    for event in engine.drain():
        tokens.setdefault(origin[event.request_id], []).extend(event.token_ids)
    for name in ROBOTS:
        alone = Engine(model, [task], kv_budget_bytes=8 << 20, ignore_eos=True)
        one = alone.tick(frames[name], noise[name])
        torch.testing.assert_close(torch.from_numpy(results[name].actions), torch.from_numpy(one.actions),
                                   rtol=1e-5, atol=1e-5)
        assert tokens[name] == [t for e in alone.drain() for t in e.token_ids]
    assert engine.kv.stats().used_bytes == 0


def test_exact_mode_prefills_one_by_one_bit_for_bit() -> None:
    model = model_with_norms("causal_text", seed=14)
    engine = fleet(model)
    frames = frames_of(model, CAMERA_SETS["ragged"])
    noise = {n: torch.randn(model.config.action_horizon, model.config.action_dim) for n in ROBOTS}
    results = engine.tick_many(frames, noise, exact=True)
    for name in ROBOTS:
        one = Engine(model, kv_budget_bytes=8 << 20).tick(frames[name], noise[name])
        assert np.array_equal(results[name].actions, one.actions)


def test_a_robot_absent_from_the_tick_is_untouched() -> None:
    model = model_with_norms("causal_text", seed=15)
    story = TextTask("story", continuation=(9,), max_tokens=50)
    engine = fleet(model, [story], ignore_eos=True)
    frames = frames_of(model, CAMERA_SETS["ragged"])
    first = engine.tick_many({"third": frames["third"]})
    engine.decode_step()
    third = engine.robot("third")
    before = (third.ticks, third.chunks, third.prefix_tokens, third.generator.get_state().clone(), third.tokens)
    question = engine.ask([5, 6], 2, robot="third")
    live = {r.id: list(r.generated) for r in engine.kv.running()}
    results = engine.tick_many({n: frames[n] for n in ("left", "right")})
    assert set(results) == {"left", "right"}
    after = (third.ticks, third.chunks, third.prefix_tokens, third.generator.get_state(), third.tokens)
    assert before[:3] == after[:3] and torch.equal(before[3], after[3]) and before[4] == after[4]
    assert [q.id for q in third.questions.take_all()] == [question]  # still waits for third's own frame
    assert all(engine.kv.get(rid).generated == gen for rid, gen in live.items())  # its text not advanced
    assert [t for _, t in first["third"].started] == ["story"]


def test_kv_is_released_when_the_batched_prefill_fails() -> None:
    model = model_with_norms("causal_text", seed=16)
    engine = fleet(model)
    cfg = model.config
    frames = frames_of(model, CAMERA_SETS["ragged"])
    too_long = make_frame(cfg, 99, prompt_len=cfg.max_prompt_tokens + 3, cameras=(False, True, False))
    empty = FrameInput(too_long.images, torch.tensor([False, False, False]), torch.zeros(0, dtype=torch.long), 0, 98)
    for bad, error in ((too_long, "prompt has"), (empty, "n_tokens")):  # fails in the model call; in allocation
        with pytest.raises(ValueError, match=error):
            engine.tick_many(frames | {"third": bad})
        stats = engine.kv.stats()
        assert stats.used_bytes == 0 and stats.live_prefixes == 0
        assert all(engine.robot(n).ticks == 0 for n in ROBOTS)
    results = engine.tick_many(frames)  # every robot's reserve is free again
    assert set(results) == set(ROBOTS) and engine.kv.stats().live_prefixes == 0


@pytest.mark.parametrize("mode", MODES)
def test_with_lanes_the_prefill_runs_in_two_halves_and_a_decode_step_beside_the_chunks(mode: str) -> None:
    """Lanes split the batched prefill over two one-thread workers (each robot's KV as its own prefill) and run
    one decode step beside the chunks: every robot's tokens are those of the engine without lanes."""
    from oxygen_ros.engine.engine import EngineLanes

    model = model_with_norms(mode, seed=14)
    task = TextTask("language", continuation=(11, 12), max_tokens=6)
    lanes = EngineLanes("cpu")
    try:
        laned, plain = fleet(model, [task], ignore_eos=True, lanes=lanes), fleet(model, [task], ignore_eos=True)
        frames = frames_of(model, CAMERA_SETS["ragged"])
        prefixes, _ = laned.prefill_many(frames)
        try:
            for name, frame in frames.items():
                k, v, _ = alone_kv(model, frame)
                torch.testing.assert_close(laned.kv.pool.view_k(prefixes[name].extent), k, rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(laned.kv.pool.view_v(prefixes[name].extent), v, rtol=1e-5, atol=1e-5)
        finally:
            for prefix in prefixes.values():
                laned.kv.release(prefix)
        tokens: dict[str, dict[int, list[int]]] = {"laned": {}, "plain": {}}
        for seq in range(3):
            frames = frames_of(model, CAMERA_SETS["ragged"], seq)
            noise = {n: torch.randn(model.config.action_horizon, model.config.action_dim) for n in ROBOTS}
            side = [e for r in laned.tick_many(frames, noise, decode_during_action=True).values() for e in r.events]
            assert bool(side) == (seq > 0)  # a step runs beside the chunks once requests are live
            events = {"laned": side + laned.decode_step(), "plain": plain.tick_many(frames, noise) and
                      plain.decode_step() + plain.decode_step()}
            for way, evs in events.items():
                for e in evs:
                    tokens[way].setdefault(e.request_id, []).extend(e.token_ids)
        for way, engine in (("laned", laned), ("plain", plain)):  # decode every request to its end
            for e in engine.drain():
                tokens[way].setdefault(e.request_id, []).extend(e.token_ids)
        assert tokens["laned"] == tokens["plain"] and all(len(t) == 6 for t in tokens["laned"].values())
    finally:
        lanes.close()
