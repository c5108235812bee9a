"""The fused action chunk (torch.compile): the same fidelity checks as the eager network, one compilation for
every prefix length and pool, a clean eager fallback with one warning, the compiled network cached across
processes, and real-time chunking through the compiled network and its compiled backward, equal to the eager
guided chunk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

from compiler_needed import needs_compiler
from engine_fixtures import make_frame, model_with_norms
from oxygen_ros.engine import Engine
from oxygen_ros.engine.engine import EngineLanes
from oxygen_ros.engine.types import ChunkGuide
from oxygen_ros.model.backends.action_sampler import make_action_sampler
from oxygen_ros.model.backends.compiled import FusedActionSampler
from oxygen_ros.model.backends.compiled_aot import COUNTERS
from oxygen_ros.model.network.config import TINY
from oxygen_ros.model.network.rtc import prefix_weights, sample_actions_rtc
from oxygen_ros.model.network.vla import Pi05Model



@pytest.fixture(scope="module")
def fused() -> dict[str, FusedActionSampler]:
    """One compiled sampler per prefix-attention mode (compiling takes seconds: share it)."""
    out = {}
    for mode in ("causal_text", "bidirectional"):
        sampler = FusedActionSampler(model_with_norms(mode))
        sampler.warm_up()
        if mode == "causal_text":
            sampler.warm_up_rtc()
        out[mode] = sampler
    return out


def observation(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    s = TINY.vision.image_size
    images = torch.rand(TINY.num_image_slots, 3, s, s, generator=g) * 2 - 1
    mask = torch.tensor([True, False, True])
    tokens = torch.randint(4, TINY.vocab_size, (9,), generator=g)
    noise = torch.randn(TINY.action_horizon, TINY.action_dim, generator=g)
    return images, mask, tokens, noise


def prefill(model: Pi05Model, capacity: int, offset: int, seed: int = 0):  # noqa: ANN201
    images, mask, tokens, noise = observation(seed)
    b = TINY.backbone
    k = torch.zeros(b.depth, capacity, b.num_kv_heads, b.head_dim)
    v = torch.zeros_like(k)
    out = model.prefill(images, mask, tokens, k[:, offset:], v[:, offset:])
    sl = slice(offset, offset + out.length)
    return k, v, sl, (images, mask, tokens, noise)


@needs_compiler
@pytest.mark.parametrize("prefix_attention", ["causal_text", "bidirectional"])
def test_fused_chunk_equals_uncached_joint_forward(fused: dict[str, FusedActionSampler], prefix_attention: str) -> None:
    sampler = fused[prefix_attention]
    assert sampler.fused and sampler.compile_s and sampler.compile_s > 0
    model = sampler.model
    k, v, sl, (images, mask, tokens, noise) = prefill(model, 300, 0)
    before = k.clone()
    got = sampler(k[:, sl], v[:, sl], noise)
    assert torch.equal(k, before), "the fused chunk must not modify the prefix cache"
    reference = model.sample_actions_uncached(images, mask, tokens, noise)
    torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-5)
    assert sampler.fused, sampler.failure


@needs_compiler
def test_one_compilation_serves_every_prefix_length_and_pool(fused: dict[str, FusedActionSampler]) -> None:
    sampler = fused["causal_text"]
    variants = counters[COUNTERS]["compiled"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for capacity, offset, seed in ((400, 0, 1), (700, 123, 2), (260, 7, 3)):
            k, v, sl, (*_, noise) = prefill(sampler.model, capacity, offset, seed)
            got = sampler(k[:, sl], v[:, sl], noise)
            torch.testing.assert_close(got, sampler.model.sample_actions(k[:, sl], v[:, sl], noise), rtol=1e-4, atol=1e-5)
    assert counters[COUNTERS]["compiled"] == variants  # no new ahead-of-time variant either
    assert sampler.fused, sampler.failure


def test_eager_backend_is_the_plain_method_bit_for_bit() -> None:
    model = model_with_norms()
    k, v, sl, (*_, noise) = prefill(model, 300, 5)
    sampler = make_action_sampler(model, "eager")
    assert torch.equal(sampler(k[:, sl], v[:, sl], noise), model.sample_actions(k[:, sl], v[:, sl], noise))
    with pytest.raises(ValueError, match="unknown action backend"):
        make_action_sampler(model, "jit")


_COMPILE_ONCE = """
import dataclasses, json, sys, torch
from torch._dynamo.utils import counters
from oxygen_ros.model.backends.compiled import FusedActionSampler
from oxygen_ros.model.backends.compiled_aot import COUNTERS
from oxygen_ros.model.network.config import TINY
from oxygen_ros.model.network.vla import Pi05Model
torch.manual_seed(0)
model = Pi05Model(dataclasses.replace(TINY, action_horizon=int(sys.argv[1]))).eval()
sampler = FusedActionSampler(model)
sampler.warm_up()
b, cfg = model.config.backbone, model.config
g = torch.Generator().manual_seed(1)
k = torch.randn(b.depth, 37, b.num_kv_heads, b.head_dim, generator=g)
noise = torch.randn(cfg.action_horizon, cfg.action_dim, generator=g)
fused, eager = sampler(k, k, noise), model.sample_actions(k, k, noise)
print(json.dumps({"fused": sampler.fused, "fx": dict(counters["inductor"]), "aot": dict(counters[COUNTERS]),
                  "chunk": fused.flatten().tolist(), "error": (fused - eager).abs().max().item()}))
"""


def _start(folder: Path, horizon: int, artefacts: bool) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(folder), "OXYGEN_ROS_AOT_ARTEFACTS": "1" if artefacts else "0"}
    proc = subprocess.run([sys.executable, "-c", _COMPILE_ONCE, str(horizon)], capture_output=True, text=True, env=env,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["fused"] and out["error"] < 1e-4  # equal to the eager chunk within float rounding
    return out


@needs_compiler
def test_a_second_start_loads_the_compiled_network_from_its_artefact(tmp_path: Path) -> None:
    """A second process loads the ahead-of-time compiled network (no tracing, no compiling) and gives the very
    same chunk; another configuration in the same folder loads nothing and compiles its own."""
    first, second = (_start(tmp_path, TINY.action_horizon, True) for _ in range(2))
    assert first["aot"].get("compiled", 0) >= 1 and not first["aot"].get("loaded")
    assert second["aot"].get("loaded", 0) >= 1 and not second["aot"].get("compiled") and not second["aot"].get("failed")
    assert second["chunk"] == first["chunk"]
    other = _start(tmp_path, TINY.action_horizon + 2, True)
    assert other["aot"].get("compiled", 0) >= 1 and not other["aot"].get("loaded")


@needs_compiler
def test_without_artefacts_the_network_comes_from_inductors_caches(tmp_path: Path) -> None:
    """``OXYGEN_ROS_AOT_ARTEFACTS=0`` (or an artefact that cannot be made): Dynamo traces again and inductor's
    FX graph and AOTAutograd caches serve the compiled graph."""
    first, second = (_start(tmp_path, TINY.action_horizon, False) for _ in range(2))
    assert not first["aot"] and not second["aot"]
    assert first["fx"].get("fxgraph_cache_miss", 0) >= 1 and not first["fx"].get("fxgraph_cache_bypass")
    assert second["fx"].get("fxgraph_cache_hit", 0) >= 1 and not second["fx"].get("fxgraph_cache_miss")
    assert second["chunk"] == first["chunk"]


@needs_compiler
def test_engine_with_the_fused_chunk_samples_real_time_chunks_fused(fused: dict[str, FusedActionSampler]) -> None:
    """Plain chunks and guided (RTC) chunks both go through compiled code in the engine, on lanes as well; the
    guided chunk equals the eager network's guided chunk (its VJP) within float rounding."""
    sampler = fused["causal_text"]
    assert sampler.rtc_compile_s and sampler.rtc_compile_s > 0
    model, h = sampler.model, TINY.action_horizon
    lanes = EngineLanes("cpu")
    try:
        engine = Engine(model, action_sampler=sampler, lanes=lanes)
        prefix, _ = engine.prefill(make_frame(TINY, 3))
        try:
            k, v = engine.kv.pool.view_k(prefix.extent), engine.kv.pool.view_v(prefix.extent)
            noise = engine.sample_noise()
            guide = ChunkGuide(torch.randn(h, TINY.action_dim), prefix_weights(2, h, h), beta=5.0)
            plain, _ = engine.act(prefix, noise)
            with torch._dynamo.config.patch(error_on_recompile=True):  # compiled at start-up (warm_up_rtc)
                guided, _ = engine.act(prefix, noise, guide)
            torch.testing.assert_close(plain, model.sample_actions(k, v, noise), rtol=1e-4, atol=1e-5)
            reference = sample_actions_rtc(model, k, v, noise, guide.target, guide.weights, guide.beta)
            torch.testing.assert_close(guided, reference, rtol=1e-5, atol=1e-5)
            assert not torch.allclose(plain, guided)
        finally:
            engine.kv.release(prefix)
    finally:
        lanes.close()
    assert sampler.fused, sampler.failure


@needs_compiler
@pytest.mark.parametrize("inference", [False, True])
def test_fused_rtc_equals_eager_rtc_at_other_lengths_without_recompiling(fused: dict[str, FusedActionSampler],
                                                                        inference: bool) -> None:
    sampler = fused["causal_text"]
    model, h = sampler.model, TINY.action_horizon
    g = torch.Generator().manual_seed(3)
    target = torch.randn(h, TINY.action_dim, generator=g)
    for capacity, offset, seed in ((300, 3, 1), (400, 17, 2)):
        k, v, sl, (*_, noise) = prefill(model, capacity, offset, seed)
        weights = prefix_weights(seed, h - 1, h, "linear")
        with torch.inference_mode(inference), torch._dynamo.config.patch(error_on_recompile=True):
            got = sampler.sample_rtc(k[:, sl], v[:, sl], noise, target, weights, 5.0)
            want = sample_actions_rtc(model, k[:, sl], v[:, sl], noise, target, weights, 5.0)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(got, sampler(k[:, sl], v[:, sl], noise), atol=1e-3)  # the guide changed it
    assert sampler.fused, sampler.failure
