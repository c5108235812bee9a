"""The CUDA-graph paths' static-shape code (padded prefix, bucketed decode rows and widths), checked on the CPU
by running it without recording; recorded for real where a GPU is present (scripts/gpu_check.sh)."""

from __future__ import annotations

import pytest
import torch

from engine_fixtures import decode_alone, make_frame, tiny_model
from oxygen_ros.engine import Engine, TextTask, make_runner
from oxygen_ros.model.backends.cuda_graphs import GraphedActionSampler, bucket, record_action_graph

LANGUAGE = TextTask("language", continuation=(11, 12, 13), every_n_frames=1, max_tokens=6)
MEMORY = TextTask("memory", continuation=(21, 22), every_n_frames=2, max_tokens=9)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_padded_static_chunk_equals_the_plain_sampler(device: str) -> None:
    model = tiny_model(seed=8).to(device)
    graphed = GraphedActionSampler(model)
    assert graphed.capture == (device == "cuda")
    b = model.config.backbone
    for t, seed in ((50, 0), (137, 1), (model.config.max_prefix_tokens, 2)):
        g = torch.Generator().manual_seed(seed)
        k = torch.randn(b.depth, t, b.num_kv_heads, b.head_dim, generator=g).to(device)
        v = torch.randn(k.shape, generator=g).to(device)
        noise = torch.randn(model.config.action_horizon, model.config.action_dim, generator=g)
        torch.testing.assert_close(graphed(k, v, noise), model.sample_actions(k, v, noise), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_a_batch_of_prefixes_replays_the_recorded_chunk_for_each(device: str) -> None:
    model = tiny_model(seed=12).to(device)
    graphed = GraphedActionSampler(model)
    b, g = model.config.backbone, torch.Generator().manual_seed(5)
    ks = [torch.randn(b.depth, t, b.num_kv_heads, b.head_dim, generator=g).to(device) for t in (30, 77, 52)]
    vs = [torch.randn(k.shape, generator=g).to(device) for k in ks]
    noise = torch.randn(3, model.config.action_horizon, model.config.action_dim, generator=g)
    got = graphed.sample_batch(ks, vs, noise)
    torch.testing.assert_close(got, model.sample_actions_batch(ks, vs, noise), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="2 prefixes for 3 noise rows"):
        graphed.sample_batch(ks[:2], vs[:2], noise)


@pytest.mark.parametrize("device", DEVICES)
def test_the_chunk_recorded_around_the_compiled_network_equals_the_plain_sampler(device: str) -> None:
    """The CUDA-graph chunk steps through the compiled network (inductor's kernels inside the recorded graph)
    and still gives the eager chunk, for several prefix lengths from one recording."""
    model = tiny_model(seed=11).to(device)
    graphed = record_action_graph(model)
    assert graphed.fused and graphed.compile_s and graphed.capture == (device == "cuda")
    b = model.config.backbone
    for t, seed in ((40, 3), (model.config.max_prefix_tokens - 3, 4)):
        g = torch.Generator().manual_seed(seed)
        k = torch.randn(b.depth, t, b.num_kv_heads, b.head_dim, generator=g).to(device)
        v = torch.randn(k.shape, generator=g).to(device)
        noise = torch.randn(model.config.action_horizon, model.config.action_dim, generator=g)
        torch.testing.assert_close(graphed(k, v, noise), model.sample_actions(k, v, noise), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_bucketed_decode_steps_give_each_request_its_greedy_text(device: str) -> None:
    model = tiny_model(seed=9).to(device)
    engine = Engine(model, [LANGUAGE, MEMORY], kv_budget_bytes=8 << 20, ignore_eos=True, decode_graphs=True)
    assert engine.graphed_decoder is not None
    runner = make_runner("oxygen", engine, tokens_per_frame=1)
    frames = [make_frame(model.config, i) for i in range(7)]
    origin, tokens = {}, {}
    for frame in frames:
        report = runner.frame(frame)
        for rid, task in report.tick.started:
            origin[rid] = (frame, task)
        for e in report.events:
            tokens.setdefault(e.request_id, []).extend(e.token_ids)
    for e in engine.drain():
        tokens.setdefault(e.request_id, []).extend(e.token_ids)
    used = set(engine.graphed_decoder._graphs)
    assert len(used) >= 2 and all(rows in (1, 2, 4, 8, 16) for rows, _ in used)  # several buckets, padded rows
    specs = {t.name: t for t in (LANGUAGE, MEMORY)}
    model_cpu = tiny_model(seed=9)
    for rid, (frame, task) in origin.items():
        assert tokens[rid] == decode_alone(model_cpu, frame, list(specs[task].continuation), specs[task].max_tokens)
    assert engine.kv.stats().used_bytes == 0


def test_bucket() -> None:
    assert bucket(1, (1, 2, 4)) == 1 and bucket(3, (1, 2, 4)) == 4 and bucket(5, (1, 2, 4)) is None


def test_the_recorded_bodies_trace_as_one_graph() -> None:
    """What a CUDA graph records must not read device values on the host (``.item()``, ``.tolist()``, shapes that
    depend on data): each would end the capture on a GPU. Dynamo with ``fullgraph=True`` refuses exactly such
    calls, so tracing each recorded body as one graph checks this on the CPU, where no capture can run. Traced on
    the CPU, the body's tanh-GELU takes its written-out form (``layers.gelu_tanh``): equal within float rounding."""
    model = tiny_model(seed=10)
    chunk = GraphedActionSampler(model).recorded.fn
    engine = Engine(model, [LANGUAGE, MEMORY], kv_budget_bytes=8 << 20, ignore_eos=True, decode_graphs=True)
    runner = make_runner("oxygen", engine, tokens_per_frame=1)
    for i in range(4):
        runner.frame(make_frame(model.config, i))
    assert engine.graphed_decoder is not None and engine.graphed_decoder._graphs
    steps = [recorded.fn for _, recorded in engine.graphed_decoder._graphs.values()]
    torch._dynamo.reset()
    for body in [chunk, *steps]:
        expected = body()
        traced = torch.compile(body, fullgraph=True, backend="eager")()
        torch.testing.assert_close(traced, expected)
    engine.cancel_all()
