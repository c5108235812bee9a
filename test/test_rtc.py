"""Real-time chunking: prefix weights, guidance weight, guided sampling against plain sampling, the VJP
against finite differences, and the engine path (prefix KV shared and untouched, no parameter gradients)."""

from __future__ import annotations

import math

import pytest
import torch

from oxygen_ros.engine import ChunkGuide, Engine
from oxygen_ros.model.network.config import TINY
from oxygen_ros.model.network.rtc import denoised_vjp, guidance_weight, prefix_weights, sample_actions_rtc

from engine_fixtures import make_frame, tiny_model


def _prefix(model, seed: int = 3):
    """A prefilled frame in plain (not inference-mode) buffers, as the engine's KV pool holds it."""
    cfg = model.config
    frame = make_frame(cfg, seed)
    b = cfg.backbone
    k = torch.zeros(b.depth, 400, b.num_kv_heads, b.head_dim)
    v = torch.zeros_like(k)
    out = model.prefill(frame.images, frame.image_mask, frame.prompt_tokens, k, v)
    return k[:, : out.length], v[:, : out.length]


def test_prefix_weights_schedules() -> None:
    lin = prefix_weights(2, 6, 10, "linear")
    torch.testing.assert_close(lin, torch.tensor([1, 1, 0.8, 0.6, 0.4, 0.2, 0, 0, 0, 0]))
    exp = prefix_weights(2, 6, 10, "exp")
    w = lin[2:6]
    torch.testing.assert_close(exp[2:6], w * torch.expm1(w) / (math.e - 1))
    assert exp[:2].tolist() == [1.0, 1.0] and exp[6:].abs().sum() == 0
    assert bool((exp[2:6] < lin[2:6]).all()), "the exponential schedule decays faster than the linear one"
    assert prefix_weights(2, 6, 10, "ones").tolist() == [1.0] * 6 + [0.0] * 4
    assert prefix_weights(2, 6, 10, "zeros").tolist() == [1.0, 1.0] + [0.0] * 8
    assert prefix_weights(5, 3, 10, "linear").tolist() == [1.0] * 3 + [0.0] * 7  # the horizon wins over the delay
    assert prefix_weights(0, 20, 4, "linear")[0] < 1.0  # no delay: nothing is frozen
    with pytest.raises(ValueError, match="schedule"):
        prefix_weights(1, 2, 4, "cosine")


def test_guidance_weight_formula() -> None:
    beta = 1e9
    for t in (0.9, 0.5, 0.1):
        expected = t / (1 - t) * (t * t + (1 - t) ** 2) / (t * t)
        assert guidance_weight(t, beta) == pytest.approx(expected)
    assert guidance_weight(1.0, 5.0) == 5.0  # c is infinite at pure noise: the clamp
    assert guidance_weight(0.5, 0.5) == 0.5
    assert guidance_weight(0.3, 0.0) == 0.0


def test_beta_zero_equals_plain_sampling() -> None:
    model = tiny_model(seed=1)
    k, v = _prefix(model)
    noise = torch.randn(TINY.action_horizon, TINY.action_dim, generator=torch.Generator().manual_seed(0))
    plain = model.sample_actions(k, v, noise)
    target = torch.randn_like(noise)
    guided = sample_actions_rtc(model, k, v, noise, target, prefix_weights(3, 8, TINY.action_horizon), beta=0.0)
    torch.testing.assert_close(guided, plain, rtol=0, atol=1e-6)


def test_large_beta_reproduces_the_previous_chunk_on_the_overlap() -> None:
    model = tiny_model(seed=2)
    k, v = _prefix(model)
    h, d = TINY.action_horizon, 3
    g = torch.Generator().manual_seed(5)
    previous = model.sample_actions(k, v, torch.randn(h, TINY.action_dim, generator=g))
    noise = torch.randn(h, TINY.action_dim, generator=g)
    plain = model.sample_actions(k, v, noise)
    weights = prefix_weights(d, h - 2, h, "exp")
    guided = sample_actions_rtc(model, k, v, noise, previous, weights, beta=50.0)
    plain_gap = (plain[:d] - previous[:d]).abs().max()
    guided_gap = (guided[:d] - previous[:d]).abs().max()
    assert plain_gap > 0.3, "the test needs chunks that differ without guidance"
    assert guided_gap < 0.05 * plain_gap, (guided_gap, plain_gap)
    # Soft weights: the middle of the overlap is pulled part of the way, the rows past the horizon are free.
    assert (guided[d : h - 2] - previous[d : h - 2]).norm() < (plain[d : h - 2] - previous[d : h - 2]).norm()
    assert not torch.allclose(guided[h - 2 :], previous[h - 2 :], atol=0.05)


def test_vjp_matches_finite_differences() -> None:
    model = tiny_model(seed=4)
    k, v = _prefix(model)
    schedule = model.denoise_schedule(k.shape[1], TINY.action_horizon, 10)
    pk, pv = k.unsqueeze(1), v.unsqueeze(1)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(1, TINY.action_horizon, TINY.action_dim, generator=g)
    cotangent = torch.randn(x.shape, generator=g)
    step = 4  # t = 0.6
    _, x0, vjp = denoised_vjp(model, x, pk, pv, schedule, step, lambda _: cotangent)

    def denoised(x_in: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return x_in - schedule.times[step] * model.expert_velocity(x_in, pk, pv, schedule, step)

    torch.testing.assert_close(x0, denoised(x))
    eps = 1e-2
    for _ in range(3):  # directional derivatives: <Jᵀc, u> = <c, J u>
        u = torch.randn(x.shape, generator=g)
        jvp = (denoised(x + eps * u) - denoised(x - eps * u)) / (2 * eps)
        assert float((vjp * u).sum()) == pytest.approx(float((cotangent * jvp).sum()), rel=2e-3, abs=1e-3)
    # The Jacobian is not the identity (the expert's velocity depends on x_t): the VJP is not the cotangent.
    assert not torch.allclose(vjp, cotangent, atol=1e-3)


def test_engine_rtc_chunk_reads_the_shared_prefix_without_gradients() -> None:
    model = tiny_model(seed=6)
    engine = Engine(model, seed=0)
    frame = make_frame(TINY, 2)
    h = TINY.action_horizon
    previous = torch.randn(h, TINY.action_dim)
    prefix, _ = engine.prefill(frame)
    try:
        k_before = engine.kv.pool.view_k(prefix.extent).clone()
        noise = engine.sample_noise()
        plain, _ = engine.act(prefix, noise)
        guide = ChunkGuide(previous, prefix_weights(2, h, h), beta=5.0)
        guided, _ = engine.act(prefix, noise, guide)
        assert torch.equal(engine.kv.pool.view_k(prefix.extent), k_before), "the prefix KV must stay read-only"
    finally:
        engine.kv.release(prefix)
    assert all(p.grad is None and not p.requires_grad for p in model.parameters())
    assert not torch.allclose(plain, guided)
    assert (guided[:2] - previous[:2]).abs().max() < (plain[:2] - previous[:2]).abs().max()
    frame.guide = guide
    tick = engine.tick(frame, noise, tasks=[])
    torch.testing.assert_close(torch.from_numpy(tick.actions), guided)


def test_rtc_runs_inside_inference_mode() -> None:
    """The simulator and the benchmark run under torch.inference_mode; the VJP must still work there."""
    model = tiny_model(seed=7)
    k, v = _prefix(model)
    noise = torch.randn(TINY.action_horizon, TINY.action_dim)
    target = torch.randn_like(noise)
    weights = prefix_weights(2, TINY.action_horizon, TINY.action_horizon)
    outside = sample_actions_rtc(model, k, v, noise, target, weights, beta=5.0)
    with torch.inference_mode():
        inside = sample_actions_rtc(model, k, v, noise.clone(), target.clone(), weights, beta=5.0)
    torch.testing.assert_close(inside, outside)


def test_rtc_in_bfloat16_runs_and_still_pulls_toward_the_previous_chunk() -> None:
    model = tiny_model(seed=8).to(torch.bfloat16)
    cfg = model.config
    frame = make_frame(cfg, 4)
    b = cfg.backbone
    k = torch.zeros(b.depth, 400, b.num_kv_heads, b.head_dim, dtype=torch.bfloat16)
    v = torch.zeros_like(k)
    n = model.prefill(frame.images, frame.image_mask, frame.prompt_tokens, k, v).length
    g = torch.Generator().manual_seed(2)
    previous = model.sample_actions(k[:, :n], v[:, :n], torch.randn(cfg.action_horizon, cfg.action_dim, generator=g))
    noise = torch.randn(cfg.action_horizon, cfg.action_dim, generator=g)
    plain = model.sample_actions(k[:, :n], v[:, :n], noise)
    guided = sample_actions_rtc(model, k[:, :n], v[:, :n], noise, previous, prefix_weights(3, cfg.action_horizon, cfg.action_horizon), 20.0)
    assert guided.dtype == torch.float32 and bool(torch.isfinite(guided).all())
    assert (guided[:3] - previous[:3]).abs().max() < 0.5 * (plain[:3] - previous[:3]).abs().max()
