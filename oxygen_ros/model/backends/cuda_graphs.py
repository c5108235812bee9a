"""CUDA graphs: the action chunk and the batched decode step replayed as one launch each.

On a GPU the model's kernels are tiny (10 action tokens, a few dozen decode rows), so launching them one by
one from Python costs more than running them. A CUDA graph records a call once with static shapes and
static buffers and replays it with one launch:

* :class:`GraphedActionSampler` — the whole chunk (every Euler step). The prefix is copied into a static
  buffer padded to the model's longest prefix; an additive bias hides the padding, RoPE of the action
  positions is an input, the flow-time modulations are constants. :func:`record_action_graph` records it
  around the compiled denoising network (inductor's fused GPU kernels): a graph replays every kernel it
  holds at a few µs each, and the eager network's ~50 kernels per layer and step made the pi05 chunk 27.5 ms
  on an H200 (docs/performance.md, GPU path).
* :class:`GraphedDecoder` — a decode step (``extend`` + LM head + greedy pick) at bucketed batch sizes and
  context widths. Padding rows repeat row 0 and write row 0's key/value to row 0's slot (same bytes, so no
  race); padding columns are masked by the context length.

``capture=False`` runs the very same static-buffer code eagerly (how the tests check it on a CPU). Shapes
outside the buckets fall back to the eager path.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from oxygen_ros.model.backends.compiled import FusedActionSampler, fast_guards
from oxygen_ros.model.network.vla import Pi05Model, VelocityFn

log = logging.getLogger(__name__)

ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
CONTEXT_STEP = 256  # context widths are rounded up to a multiple of this


class _Recorded:
    """A function of static buffers, captured into a CUDA graph (or just run, when not capturing)."""

    def __init__(self, fn, capture: bool, pool=None) -> None:  # noqa: ANN001
        self.fn, self.graph, self.out = fn, None, None
        if not capture:
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph (allocator, kernel selection)
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: another lane may launch work on the device while this one records
        with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
            self.out = fn()

    def __call__(self):  # noqa: ANN204
        if self.graph is None:
            return self.fn()
        self.graph.replay()
        return self.out


class GraphedActionSampler:
    """An :class:`~oxygen_ros.model.backends.compiled.ActionSampler` replaying one CUDA graph per chunk."""

    replays_cuda_graphs = True  # what the runtime and the bench ask of a sampler (others lack the attribute)

    def __init__(self, model: Pi05Model, network: VelocityFn | None = None, capture: bool | None = None) -> None:
        cfg, b = model.config, model.config.backbone
        self.model = model
        self.fused = False  # the recorded network is the compiled one (record_action_graph sets these two)
        self.compile_s: float | None = None
        self.capture = model.device.type == "cuda" if capture is None else capture
        dev, dtype = model.device, model.dtype
        self.max_prefix = cfg.max_prefix_tokens
        self.k = torch.zeros(b.depth, self.max_prefix, b.num_kv_heads, b.head_dim, dtype=dtype, device=dev)
        self.v = torch.zeros_like(self.k)
        self.slots = torch.arange(self.max_prefix, device=dev)
        self.bias = torch.zeros(self.max_prefix, dtype=torch.float32, device=dev)
        self.x = torch.zeros(1, cfg.action_horizon, cfg.action_dim, dtype=torch.float32, device=dev)
        with torch.inference_mode():
            self.schedule = model.denoise_schedule(0, cfg.action_horizon, cfg.num_denoise_steps)
        network = network or model.expert_network
        pk, pv = self.k.unsqueeze(1), self.v.unsqueeze(1)  # [L, 1, T, Hkv, D] views of the static buffers

        @torch.inference_mode()
        def chunk() -> Tensor:
            return model.denoise(pk, pv, self.x, self.schedule, network, self.bias)

        self._set_length(1)
        self.recorded = _Recorded(chunk, self.capture)

    @torch.inference_mode()
    def _set_length(self, t: int) -> None:
        self.bias.copy_(torch.where(self.slots < t, 0.0, float("-inf")))
        positions = torch.arange(t, t + self.x.shape[1], device=self.x.device).unsqueeze(0)
        cos, sin = self.model.rope.cos_sin(positions, self.model.dtype)
        self.schedule.cos.copy_(cos)
        self.schedule.sin.copy_(sin)

    @torch.inference_mode()
    def __call__(self, prefix_k: Tensor, prefix_v: Tensor, noise: Tensor) -> Tensor:
        t = prefix_k.shape[1]
        if t > self.max_prefix or noise.shape != self.x.shape[1:]:
            return self.model.sample_actions(prefix_k, prefix_v, noise)  # outside the recorded shape
        self.k[:, :t].copy_(prefix_k)
        self.v[:, :t].copy_(prefix_v)
        self._set_length(t)
        self.x.copy_(noise.unsqueeze(0))
        return self.recorded()[0].clone()

    def sample_batch(self, prefix_k: Sequence[Tensor], prefix_v: Sequence[Tensor], noise: Tensor) -> Tensor:
        """Chunks for several prefixes (a fleet's tick, ``Engine.act_batch``): the recorded chunk replayed once per
        prefix, in turn. On an H200 one pi05 replay took 13.8 ms where the eager batched chunk of 8 robots took
        236.5 ms (docs/bench-gpu/fleet); a chunk recorded for a batch would share the weight reads too."""
        if len(prefix_k) != noise.shape[0] or len(prefix_v) != noise.shape[0]:
            raise ValueError(f"{len(prefix_k)} prefixes for {noise.shape[0]} noise rows")
        return torch.stack([self(k, v, n) for k, v, n in zip(prefix_k, prefix_v, noise)])


def record_action_graph(model: Pi05Model, progress: Callable[[str], None] | None = None) -> GraphedActionSampler:
    """The action chunk's CUDA graph around the compiled denoising network; around the eager network, with one
    warning, where compiling fails (the failure then happens in the warm-up runs, before any recording)."""
    say = progress or (lambda message: log.info("%s", message))
    fused = FusedActionSampler(model, say)
    if fused.fused:
        say("action chunk: compiling its network, then recording its CUDA graph ...")
        t0 = time.perf_counter()
        try:
            with fast_guards():
                sampler = GraphedActionSampler(model, network=fused.network)
        except Exception as exc:  # noqa: BLE001 - any compiler failure means: record the eager network
            fused._fail(exc)
        else:
            sampler.fused, sampler.compile_s = True, time.perf_counter() - t0
            say(f"action chunk: compiled and recorded in {sampler.compile_s:.1f} s")
            return sampler
    say("action chunk: recording its CUDA graph ...")
    return GraphedActionSampler(model)


@dataclass
class _StepBuffers:
    tokens: Tensor  # [R, 1]
    positions: Tensor  # [R, 1]
    write_index: Tensor  # [R, 1]
    write_src: Tensor  # [R] the row whose key/value each row writes (padding rows: row 0)
    ctx_index: Tensor  # [R, T]
    ctx_len: Tensor  # [R]
    last_rows: Tensor  # [R] rows whose next token is picked (padding: row 0)


def bucket(value: int, buckets: Sequence[int]) -> int | None:
    return next((b for b in buckets if b >= value), None)


class GraphedDecoder:
    """One batched decode step (``extend`` of one token per row + greedy next token), replayed from CUDA graphs
    recorded per (rows bucket, context-width bucket), lazily or in :meth:`warm_up`."""

    def __init__(self, model: Pi05Model, pool_k: Tensor, pool_v: Tensor, max_context: int,
                 row_buckets: Sequence[int] = ROW_BUCKETS, capture: bool | None = None) -> None:
        self.model, self.pool_k, self.pool_v = model, pool_k, pool_v
        self.capture = model.device.type == "cuda" if capture is None else capture
        self.row_buckets = tuple(row_buckets)
        self.width_buckets = tuple(CONTEXT_STEP * i for i in range(1, math.ceil(max_context / CONTEXT_STEP) + 1))
        self._graphs: dict[tuple[int, int], tuple[_StepBuffers, _Recorded]] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.capture else None

    def _buffers(self, rows: int, width: int) -> _StepBuffers:
        dev = self.model.device
        z = lambda *shape: torch.zeros(shape, dtype=torch.long, device=dev)  # noqa: E731
        return _StepBuffers(z(rows, 1), z(rows, 1), z(rows, 1), z(rows), z(rows, width),
                            torch.ones(rows, dtype=torch.long, device=dev), z(rows))

    def _record(self, buf: _StepBuffers) -> _Recorded:
        """Record a step of the buffers' current contents. Recording runs the step (twice, to warm up): it must
        hold a real plan (its writes are then idempotent) or the pool must be idle (an all-zero plan writes
        slot 0)."""

        @torch.inference_mode()
        def step() -> Tensor:
            hidden = self.model.extend(buf.tokens, buf, self.pool_k, self.pool_v)
            return self.model.greedy_tokens(hidden.index_select(0, buf.last_rows))

        return _Recorded(step, self.capture, self._pool)

    def warm_up(self, rows: Sequence[int] | None = None) -> int:
        """Record the graphs of these row buckets at every context width now, while no request is live (start-up);
        returns how many graphs exist."""
        for r in rows or self.row_buckets:
            for w in self.width_buckets:
                key = (bucket(r, self.row_buckets) or r, w)
                if key not in self._graphs:
                    buf = self._buffers(*key)
                    self._graphs[key] = (buf, self._record(buf))
        return len(self._graphs)

    def step(self, plan) -> list[int] | None:  # noqa: ANN001 - a kv.batch.BatchPlan
        """Next token of each request of ``plan`` (one token per row), or None when no bucket fits."""
        n, t = plan.ctx_index.shape
        rows, width = bucket(n, self.row_buckets), bucket(t, self.width_buckets)
        if rows is None or width is None or plan.tokens.shape[1] != 1:
            return None
        known = self._graphs.get((rows, width))
        buf = known[0] if known else self._buffers(rows, width)
        pad = rows - n
        dev = buf.tokens.device

        def fill(dst: Tensor, src: Tensor) -> None:
            src = src.to(dev)
            dst[:n].copy_(src)
            if pad:
                dst[n:].copy_(src[:1].expand(pad, *src.shape[1:]))

        fill(buf.tokens, plan.tokens)
        fill(buf.positions, plan.positions)
        fill(buf.write_index, plan.write_index)
        buf.write_src.copy_(torch.cat((torch.arange(n), torch.zeros(pad, dtype=torch.long))).to(dev))
        buf.ctx_index.zero_()
        buf.ctx_index[:n, :t].copy_(plan.ctx_index.to(dev))
        buf.ctx_index[n:, :t].copy_(plan.ctx_index[:1].to(dev).expand(pad, t))
        fill(buf.ctx_len, plan.ctx_len)
        last = plan.last_rows.to(dev)
        buf.last_rows.zero_()
        buf.last_rows[: last.shape[0]].copy_(last)
        if known is None:  # first use of this bucket: record it on this very plan (see _record)
            self._graphs[(rows, width)] = (buf, self._record(buf))
        return self._graphs[(rows, width)][1]()[: last.shape[0]].tolist()
