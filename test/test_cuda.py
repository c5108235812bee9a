"""Conformance on CUDA (skipped without a GPU; scripts/gpu_check.sh runs it): the model on the GPU gives the
CPU's KV (one prefix, and several in one batched prefill), actions (plain and RTC-guided) and greedy text, also from CUDA graphs and through the engine with
lanes (streams)."""

from __future__ import annotations

import pytest
import torch

from engine_fixtures import decode_alone, make_frame, tiny_model
from oxygen_ros.engine import Engine, TextTask, make_runner
from oxygen_ros.engine.engine import EngineLanes
from oxygen_ros.model.network.batched_prefill import prefill_batch
from oxygen_ros.model.backends.action_sampler import make_action_sampler
from oxygen_ros.model.backends.compiled_prefill import FusedPrefill, make_prefiller
from oxygen_ros.model.network.rtc import prefix_weights, sample_actions_rtc

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
LANGUAGE = TextTask("language", continuation=(11, 12, 13), every_n_frames=1, max_tokens=6)


def test_prefill_and_actions_match_the_cpu() -> None:
    cpu = tiny_model(seed=12)
    gpu = tiny_model(seed=12).cuda()
    frame = make_frame(cpu.config, 0)
    b = cpu.config.backbone
    k = torch.zeros(b.depth, 200, b.num_kv_heads, b.head_dim)
    v = torch.zeros_like(k)
    kg, vg = k.cuda(), v.cuda()
    n = cpu.prefill(frame.images, frame.image_mask, frame.prompt_tokens, k, v).length
    gpu.prefill(frame.images.cuda(), frame.image_mask.cuda(), frame.prompt_tokens.cuda(), kg, vg)
    torch.testing.assert_close(kg.cpu(), k, rtol=1e-3, atol=1e-4)
    noise = torch.randn(cpu.config.action_horizon, cpu.config.action_dim)
    ref = cpu.sample_actions(k[:, :n], v[:, :n], noise)
    for backend in ("eager", "cuda_graph"):
        got = make_action_sampler(gpu, backend)(kg[:, :n], vg[:, :n], noise)
        torch.testing.assert_close(got.cpu(), ref, rtol=1e-3, atol=1e-4)
    # Real-time chunking (a VJP through the expert at every step) gives the CPU's guided chunk too.
    target = torch.randn(noise.shape, generator=torch.Generator().manual_seed(3))
    weights = prefix_weights(3, 8, cpu.config.action_horizon)
    guided = sample_actions_rtc(cpu, k[:, :n], v[:, :n], noise, target, weights, beta=5.0)
    got = sample_actions_rtc(gpu, kg[:, :n], vg[:, :n], noise, target, weights, beta=5.0)
    torch.testing.assert_close(got.cpu(), guided, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("prefix_attention", ["causal_text", "bidirectional"])
def test_fused_prefill_on_cuda_matches_the_eager_one(prefix_attention: str) -> None:
    """The compiled prefill (inductor's GPU kernels): eager's KV and last hidden state, for two prompt lengths
    and camera counts from one compilation."""
    gpu = tiny_model(seed=14, prefix_attention=prefix_attention).cuda()
    fused = FusedPrefill(gpu)
    fused.warm_up()
    b = gpu.config.backbone
    for seq, prompt_len, cameras in ((0, 6, (True, False, True)), (1, 11, (True, True, True))):
        frame = make_frame(gpu.config, seq, prompt_len, cameras)
        inputs = (frame.images.cuda(), frame.image_mask.cuda(), frame.prompt_tokens.cuda())
        k = torch.zeros(2, b.depth, 200, b.num_kv_heads, b.head_dim, device="cuda")
        v = torch.zeros_like(k)
        with torch._dynamo.config.patch(error_on_recompile=True):
            got = fused(*inputs, k[0], v[0])
        want = gpu.prefill(*inputs, k[1], v[1])
        torch.testing.assert_close(k[0], k[1], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(v[0], v[1], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got.last_hidden, want.last_hidden, rtol=1e-4, atol=1e-4)
    assert fused.fused, fused.failure
    assert make_prefiller(gpu, "auto") == gpu.prefill  # auto: the eager prefill on CUDA (faster there, measured)


@pytest.mark.parametrize("prefix_attention", ["causal_text", "bidirectional"])
def test_batched_prefill_on_cuda_matches_the_cpu(prefix_attention: str) -> None:
    """Three robots' ragged prefixes in one batched prefill on the GPU: each one's KV as on the CPU alone."""
    cpu = tiny_model(seed=15, prefix_attention=prefix_attention)
    gpu = tiny_model(seed=15, prefix_attention=prefix_attention).cuda()
    cameras = ((True, False, True), (True, True, True), (False, True, False))
    frames = [make_frame(cpu.config, 10 * i, 4 + 5 * i, cameras[i]) for i in range(3)]
    b = cpu.config.backbone
    k = torch.zeros(3, b.depth, 200, b.num_kv_heads, b.head_dim, device="cuda")
    v = torch.zeros_like(k)
    outs = prefill_batch(gpu, [(f.images, f.image_mask, f.prompt_tokens) for f in frames], list(k), list(v))
    for i, (frame, out) in enumerate(zip(frames, outs)):
        kc, vc = torch.zeros_like(k[i], device="cpu"), torch.zeros_like(v[i], device="cpu")
        want = cpu.prefill(frame.images, frame.image_mask, frame.prompt_tokens, kc, vc)
        assert out.length == want.length
        torch.testing.assert_close(k[i].cpu(), kc, rtol=1e-3, atol=1e-4)
        torch.testing.assert_close(v[i].cpu(), vc, rtol=1e-3, atol=1e-4)
        torch.testing.assert_close(out.last_hidden.cpu(), want.last_hidden, rtol=1e-3, atol=1e-4)


def _streams(engine: Engine, frames) -> dict[int, list[int]]:  # noqa: ANN001
    runner = make_runner("oxygen", engine, tokens_per_frame=1)
    events = []
    for frame in frames:
        events += runner.frame(frame).events
    events += engine.drain()
    out: dict[int, list[int]] = {}
    for e in events:
        out.setdefault(e.frame_seq, []).extend(e.token_ids)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_engine_with_graphs_and_lanes_gives_the_greedy_text(dtype: torch.dtype) -> None:
    model = tiny_model(seed=13).cuda().to(dtype)
    frames = [make_frame(model.config, i) for i in range(6)]
    frames = [type(f)(f.images.cuda(), f.image_mask.cuda(), f.prompt_tokens.cuda(), f.stamp_ns, f.frame_seq)
              for f in frames]
    plain = _streams(Engine(model, [LANGUAGE], kv_budget_bytes=8 << 20, ignore_eos=True), frames)
    lanes = EngineLanes("cuda")
    try:
        engine = Engine(model, [LANGUAGE], kv_budget_bytes=8 << 20, ignore_eos=True, lanes=lanes, decode_graphs=True,
                        action_sampler=make_action_sampler(model, "cuda_graph"))
        graphed = _streams(engine, frames)
    finally:
        lanes.close()
    assert graphed == plain and len(plain) == 6
    if dtype == torch.float32:  # and both equal the CPU's greedy text
        cpu = tiny_model(seed=13)
        for f in frames:
            cpu_frame = type(f)(f.images.cpu(), f.image_mask.cpu(), f.prompt_tokens.cpu(), f.stamp_ns, f.frame_seq)
            assert plain[f.frame_seq] == decode_alone(cpu, cpu_frame, list(LANGUAGE.continuation), LANGUAGE.max_tokens)
