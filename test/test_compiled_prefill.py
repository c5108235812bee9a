"""The fused prefill (torch.compile): the same KV and last hidden state as the eager prefill in both prefix
attention modes, one compilation for every prompt length and camera count, the block-wise attention equal to
the dense-mask one; and for both compiled paths (action chunk, prefill) a clean eager fallback with one
warning."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

from compiler_needed import needs_compiler
from engine_fixtures import make_frame, model_with_norms
from oxygen_ros.engine import Engine
from oxygen_ros.model.backends import compiled
from oxygen_ros.model.backends.compiled import FusedActionSampler
from oxygen_ros.model.backends.compiled_aot import COUNTERS
from oxygen_ros.model.backends.compiled_prefill import EAGER_FUNCTIONS, FusedPrefill, make_prefiller
from oxygen_ros.model.network.config import TINY
from oxygen_ros.model.network.cpu_scores import float32_scores
from oxygen_ros.model.network.layers import attend, dot_product_attention, gelu_tanh
from oxygen_ros.model.network.prefix_attention import prefix_attention, text_rows_mask
from oxygen_ros.model.network.vla import Pi05Model, PrefixOutput

MODES = ("causal_text", "bidirectional")


@pytest.fixture(scope="module")
def fused() -> dict[str, FusedPrefill]:
    """One compiled prefill per prefix-attention mode (compiling takes a while: share it)."""
    out = {}
    for mode in MODES:
        prefiller = FusedPrefill(model_with_norms(mode))
        prefiller.warm_up()
        prefiller.warm_up_batch()
        out[mode] = prefiller
    return out


def observation(slots: list[bool], prompt_len: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    s = TINY.vision.image_size
    images = torch.rand(TINY.num_image_slots, 3, s, s, generator=g) * 2 - 1
    tokens = torch.randint(4, TINY.vocab_size, (prompt_len,), generator=g)
    return images, torch.tensor(slots), tokens


def run(prefill, model: Pi05Model, obs, offset: int = 0) -> tuple[PrefixOutput, torch.Tensor, torch.Tensor]:  # noqa: ANN001
    b = TINY.backbone
    k = torch.full((b.depth, 300, b.num_kv_heads, b.head_dim), 7.0)
    v = torch.full_like(k, 7.0)
    out = prefill(*obs, k[:, offset:], v[:, offset:])
    return out, k, v


def assert_same_prefix(fused_run, eager_run) -> None:  # noqa: ANN001
    (a, ka, va), (b, kb, vb) = fused_run, eager_run
    assert (a.length, a.num_image_tokens) == (b.length, b.num_image_tokens)
    torch.testing.assert_close(ka, kb, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(va, vb, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a.last_hidden, b.last_hidden, rtol=1e-5, atol=1e-5)


@needs_compiler
@pytest.mark.parametrize("mode", MODES)
def test_fused_prefill_equals_eager(fused: dict[str, FusedPrefill], mode: str) -> None:
    prefiller = fused[mode]
    assert prefiller.fused and prefiller.compile_s and prefiller.compile_s > 0
    model = prefiller.model
    obs = observation([True, False, True], 11, seed=1)
    got = run(prefiller, model, obs, offset=5)
    assert_same_prefix(got, run(model.prefill, model, obs, offset=5))
    k = got[1]
    assert torch.all(k[:, :5] == 7.0) and torch.all(k[:, 5 + got[0].length :] == 7.0), "writes only its own slots"
    assert prefiller.fused, prefiller.failure


@needs_compiler
def test_other_prompt_lengths_and_camera_counts_do_not_recompile(fused: dict[str, FusedPrefill]) -> None:
    prefiller = fused["causal_text"]
    model = prefiller.model
    graphs, compiles = counters["stats"]["unique_graphs"], counters["inductor"]["fxgraph_cache_miss"]
    variants = counters[COUNTERS]["compiled"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for slots, n, seed in (([True, True, True], 23, 2), ([False, True, False], 2, 3), ([True, True, False], 57, 4)):
            obs = observation(slots, n, seed)
            assert_same_prefix(run(prefiller, model, obs), run(model.prefill, model, obs))
    assert counters["stats"]["unique_graphs"] == graphs
    assert counters["inductor"]["fxgraph_cache_miss"] == compiles
    assert counters[COUNTERS]["compiled"] == variants  # no new ahead-of-time variant either
    assert prefiller.fused, prefiller.failure


@needs_compiler
def test_no_camera_or_a_one_token_prompt_runs_eager_without_compiling(fused: dict[str, FusedPrefill]) -> None:
    """Sizes 0 and 1 are specialized by Dynamo: such frames take the eager network instead of a new graph."""
    prefiller = fused["bidirectional"]
    model = prefiller.model
    graphs, variants = counters["stats"]["unique_graphs"], counters[COUNTERS]["compiled"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for obs in (observation([False, False, False], 9), observation([True, False, False], 1)):
            assert_same_prefix(run(prefiller, model, obs), run(model.prefill, model, obs))
    assert counters["stats"]["unique_graphs"] == graphs and counters[COUNTERS]["compiled"] == variants and prefiller.fused


@needs_compiler
def test_bad_input_is_refused_and_the_fused_path_kept(fused: dict[str, FusedPrefill]) -> None:
    prefiller = fused["causal_text"]
    images, slots, _ = observation([True, True, False], 3)
    with pytest.raises(ValueError, match="prompt has"):
        run(prefiller, prefiller.model, (images, slots, torch.ones(TINY.max_prompt_tokens + 1, dtype=torch.long)))
    with pytest.raises(ValueError, match="KV destination"):
        run(prefiller, prefiller.model, (images, slots, torch.ones(8, dtype=torch.long)), offset=290)
    assert prefiller.fused, prefiller.failure


def assert_pool_holds_the_eager_prefix(engine: Engine, prefix, frame) -> None:  # noqa: ANN001
    """The prefix's KV in the engine's pool equals the eager prefill of the same frame."""
    k, v = engine.kv.pool.view_k(prefix.extent), engine.kv.pool.view_v(prefix.extent)
    ek, ev = torch.zeros_like(k), torch.zeros_like(v)
    engine.model.prefill(frame.images, frame.image_mask, frame.prompt_tokens, ek, ev)
    torch.testing.assert_close(k, ek, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(v, ev, rtol=1e-5, atol=1e-5)


@needs_compiler
def test_engine_prefills_through_the_fused_path(fused: dict[str, FusedPrefill]) -> None:
    prefiller = fused["causal_text"]
    model = prefiller.model
    engine = Engine(model, prefiller=prefiller)
    assert engine.clone_with_model(model).prefiller is prefiller
    assert engine.clone_with_model(model_with_norms()).prefiller is not prefiller
    frame = make_frame(TINY, 3)
    prefix, _ = engine.prefill(frame)
    try:
        assert_pool_holds_the_eager_prefix(engine, prefix, frame)
    finally:
        engine.kv.release(prefix)
    assert prefiller.fused, prefiller.failure


# Fleets of B robots: (camera slots, prompt length) per robot; the same camera count or ragged ones.
FLEETS = (
    (((True, True, True), 5), ((True, False, True), 17)),
    (((True, True, False), 3), ((True, True, False), 9), ((False, True, True), 2), ((True, False, True), 30)),
    (((False, True, False), 12), ((True, True, True), 2), ((True, False, False), 7)),
    tuple(((True, True, True), 4) for _ in range(6)),
)


@needs_compiler
@pytest.mark.parametrize("mode", MODES)
def test_a_batch_through_the_fused_prefill_equals_each_frames_own_prefill(fused: dict[str, FusedPrefill],
                                                                         mode: str) -> None:
    """B frames (ragged prompts, each its own cameras) in one compiled call: each frame's KV and last hidden
    state as its own eager prefill, for every B and mix, with the graphs compiled by ``warm_up_batch`` only."""
    prefiller = fused[mode]
    assert prefiller.batch_compile_s and prefiller.batch_compile_s > 0
    model, b = prefiller.model, TINY.backbone
    graphs, compiles = counters["stats"]["unique_graphs"], counters["inductor"]["fxgraph_cache_miss"]
    variants = counters[COUNTERS]["compiled"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for fleet in FLEETS:
            frames = [observation(list(slots), n, seed) for seed, (slots, n) in enumerate(fleet)]
            ks = [torch.full((b.depth, 300, b.num_kv_heads, b.head_dim), 7.0) for _ in frames]
            vs = [k.clone() for k in ks]
            outs = prefiller.prefill_batch(frames, ks, vs)
            for obs, out, k, v in zip(frames, outs, ks, vs):
                assert_same_prefix((out, k, v), run(model.prefill, model, obs))
    assert counters["stats"]["unique_graphs"] == graphs
    assert counters["inductor"]["fxgraph_cache_miss"] == compiles
    assert counters[COUNTERS]["compiled"] == variants  # no new ahead-of-time variant either
    assert prefiller.fused, prefiller.failure


@needs_compiler
def test_a_fleet_prefills_in_one_compiled_call(fused: dict[str, FusedPrefill]) -> None:
    """The engine's fleet prefill goes through the compiled batch: each robot's pool extent holds its own
    eager prefill."""
    prefiller = fused["bidirectional"]
    model = prefiller.model
    engine = Engine(model, prefiller=prefiller)
    engine.add_robot("b")
    engine.add_robot("c")
    assert engine.batches_prefill
    frames = {"": make_frame(TINY, 4), "b": make_frame(TINY, 5, prompt_len=11, cameras=(True, True, True)),
              "c": make_frame(TINY, 6, prompt_len=3, cameras=(False, True, False))}
    calls = []
    batch = prefiller.prefill_batch
    prefiller.prefill_batch = lambda *args: calls.append(len(args[0])) or batch(*args)  # type: ignore[method-assign]
    try:
        prefixes, _ = engine.prefill_many(frames)
    finally:
        del prefiller.prefill_batch
    try:
        assert calls == [3]
        for name, frame in frames.items():
            assert_pool_holds_the_eager_prefix(engine, prefixes[name], frame)
    finally:
        for prefix in prefixes.values():
            engine.kv.release(prefix)
    assert prefiller.fused, prefiller.failure


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n_img", [0, 16, 48])
def test_block_wise_attention_equals_the_dense_mask(mode: str, n_img: int) -> None:
    model = model_with_norms(mode)
    g = torch.Generator().manual_seed(n_img)
    t, b = n_img + 7, TINY.backbone
    q = torch.randn(1, t, b.num_heads, b.head_dim, generator=g)
    k, v = (torch.randn(1, t, b.num_kv_heads, b.head_dim, generator=g) for _ in range(2))
    dense = attend(q, k, v, model.prefix_mask(n_img, t - n_img).unsqueeze(0))
    text_mask = text_rows_mask(n_img, t - n_img, b.num_heads // b.num_kv_heads, q.device) if mode == "causal_text" else None
    torch.testing.assert_close(prefix_attention(q, k, v, text_mask), dense, rtol=1e-5, atol=1e-6)


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_written_out_attention_in_a_compiled_graph_equals_the_fused_kernel(dtype: torch.dtype) -> None:
    """Compiled for the CPU, ``dot_product_attention`` is two products around a float32 softmax (with a mask
    and without); eager it is the fused kernel. Both agree within the dtype's rounding."""
    g = torch.Generator().manual_seed(0)
    q = (3 * torch.randn(2, 1, 96, 16, generator=g)).to(dtype)  # scores of a few units, as trained models have
    k, v = ((3 * torch.randn(2, 1, 40, 16, generator=g)).to(dtype) for _ in range(2))
    mask = torch.rand(2, 1, 96, 40, generator=g) < 0.7
    mask[..., 0] = True  # every row sees a key
    compiled_attention = torch.compile(dot_product_attention, fullgraph=True)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    for m in (mask, None):
        fused_kernel = dot_product_attention(q, k, v, m, 0.25)
        written_out = compiled_attention(q, k, v, m, 0.25)
        torch.testing.assert_close(written_out.float(), fused_kernel.float(), **tol)
        reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=m, scale=0.25)
        # no less exact than the fused kernel against a float64 reference (float32 scores in both)
        assert (written_out.double() - reference).abs().max() <= 1.5 * (fused_kernel.double() - reference).abs().max() + 1e-6
    hidden = mask.clone()
    hidden[0, 0, 5] = False  # a row that sees no key (a padding row) stays finite, it does not turn NaN
    assert compiled_attention(q, k, v, hidden, 0.25).isfinite().all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_written_out_gelu_in_a_compiled_graph_equals_torchs_tanh_gelu(dtype: torch.dtype) -> None:
    """Compiled for the CPU, ``gelu_tanh`` is x·sigmoid(2u) in float32; eager it is ``F.gelu(tanh)``. The two
    agree within the dtype's rounding, and the written-out form is no further from float64 than torch's."""
    x = torch.linspace(-12, 12, 20_001).to(dtype)
    reference = F.gelu(x.double(), approximate="tanh")
    eager = gelu_tanh(x)
    written_out = torch.compile(gelu_tanh, fullgraph=True)(x)
    assert written_out.dtype == dtype
    ulp = torch.finfo(dtype).eps
    torch.testing.assert_close(written_out.float(), eager.float(), rtol=4 * ulp, atol=4 * ulp)  # a few ulps
    error = lambda y: ((y.double() - reference).abs() / reference.abs().clamp_min(1.0)).max()
    assert error(written_out) <= error(eager) + 1e-7


def test_eager_backend_is_the_plain_method() -> None:
    model = model_with_norms()
    assert make_prefiller(model, "eager") == model.prefill
    with pytest.raises(ValueError, match="unknown prefill backend"):
        make_prefiller(model, "jit")


class Path:
    """One compiled path (the action chunk or the prefill) driven the same way for the fallback tests."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.model = model_with_norms()
        obs = observation([True, False, True], 9)
        self.prefix = run(self.model.prefill, self.model, obs)
        self.obs = obs

    def make(self) -> FusedActionSampler | FusedPrefill:
        return FusedActionSampler(self.model) if self.name == "action chunk" else FusedPrefill(self.model)

    def result(self, call) -> torch.Tensor:  # noqa: ANN001
        if self.name == "prefill":
            out, k, v = run(call, self.model, self.obs)
            return torch.cat((k.flatten(), v.flatten(), out.last_hidden))
        out, k, v = self.prefix
        noise = torch.randn(TINY.action_horizon, TINY.action_dim, generator=torch.Generator().manual_seed(5))
        return call(k[:, : out.length], v[:, : out.length], noise)

    def eager(self) -> torch.Tensor:
        return self.result(self.model.prefill if self.name == "prefill" else self.model.sample_actions)


@pytest.mark.parametrize("name", ["action chunk", "prefill"])
def test_no_compiler_falls_back_to_eager_with_one_warning(name: str, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(compiled, "compiler_available", lambda: "no C++ compiler (g++) on PATH")
    path = Path(name)
    with caplog.at_level(logging.WARNING, logger="oxygen_ros.model.backends.compiled"):
        fused = path.make()
        assert fused.warm_up() == 0.0
    assert not fused.fused and "g++" in (fused.failure or "")
    assert torch.equal(path.result(fused), path.eager())
    assert len([r for r in caplog.records if name in r.getMessage() and "eager" in r.getMessage()]) == 1


@pytest.mark.parametrize("name", ["action chunk", "prefill"])
def test_a_failing_compiled_call_falls_back_once(name: str, caplog: pytest.LogCaptureFixture) -> None:
    path = Path(name)
    fused = path.make()
    calls = []

    def broken(*args: object) -> torch.Tensor:
        calls.append(1)
        raise RuntimeError("inductor: C++ compile error\nlong details")

    fused._compiled = broken if name == "action chunk" else dict.fromkeys(EAGER_FUNCTIONS, broken)  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger="oxygen_ros.model.backends.compiled"):
        first, second = path.result(fused), path.result(fused)
    expected = path.eager()
    assert torch.equal(first, expected) and torch.equal(second, expected)
    assert len(calls) == 1 and not fused.fused and "C++ compile error" in (fused.failure or "")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "long details" not in warnings[0]


def test_float32_scores_equal_the_float64_product_for_every_leading_shape() -> None:
    """``cpu_scores.float32_scores``: bfloat16 q, k → float32 scores as exact as torch's float32 product, for
    one leading index (returned as oneDNN gives it), several, and keys broadcast over the queries' heads."""
    g = torch.Generator().manual_seed(0)
    for q_shape, k_shape in (((1, 1, 40, 16), (1, 1, 24, 16)), ((2, 3, 40, 16), (2, 3, 24, 16)),
                             ((2, 3, 40, 16), (2, 1, 24, 16)), ((40, 16), (24, 16))):
        q = (3 * torch.randn(q_shape, generator=g)).bfloat16()
        k = (3 * torch.randn(k_shape, generator=g)).bfloat16()
        got = float32_scores(q, k)
        reference = torch.matmul(q.double(), k.double().transpose(-1, -2))
        assert got.dtype == torch.float32 and got.shape == reference.shape
        mkl = torch.matmul(q.float(), k.float().transpose(-1, -2))
        assert (got.double() - reference).abs().max() <= 2 * (mkl.double() - reference).abs().max() + 1e-6
