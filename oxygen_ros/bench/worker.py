"""One benchmark worker process: the timing of every mode interleaved in one process, or the peak memory of
one mode in a process of its own. Progress goes to stderr, the result as one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import torch

from oxygen_ros.engine import make_runner
from oxygen_ros.engine.modes import ParallelRunner
from oxygen_ros.model.network.rtc import sample_actions_rtc
from oxygen_ros.model.network.vla import count_parameters
from oxygen_ros.engine.allocator import keep_freed_buffers

from .matmul_floor import MatmulFloor
from .memory import PeakMemory, status_kib
from .rtc import bench_guide
from .workload import BenchRuntime, Workload


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class PartsProbe:
    """Measures P (one prefill) and A (one action chunk), each by the engine's path and by the eager network
    beside it, and D(B) (one batched decode step at batch B).

    One ``sample()`` per round of the interleaved run, so the parts see the same machine as the modes."""

    def __init__(self, workload: Workload, model, runtime: BenchRuntime, batches: list[int], rounds: int) -> None:  # noqa: ANN001
        self.workload, self.model, self.runtime = workload, model, runtime
        self.frames = workload.frames(model.config)
        self.engine = workload.engine(model, decode_len=1, runtime=runtime)
        self.decoders = {}
        for b in batches:  # B live requests that outlast every round
            self.decoders[b] = workload.decoding_engine(model, b, rounds)
        self.prefill: list[float] = []
        self.prefill_eager: list[float] = []
        self.action: list[float] = []
        self.action_eager: list[float] = []
        self.guide = bench_guide(model.config)
        self.action_rtc: list[float] = []  # the same chunk by real-time chunking (bench/rtc.py), engine's path
        self.action_rtc_eager: list[float] = []  # ... and on the eager network
        self.decode: dict[int, list[float]] = {b: [] for b in batches}
        self.prefix_tokens = 0
        # The prefill's matrix products alone (same shapes, dtype, layouts), timed in every round beside P.
        frame, b = self.frames[0], model.config.backbone
        k = torch.zeros(b.depth, model.config.max_prefix_tokens, b.num_kv_heads, b.head_dim, dtype=model.dtype,
                        device=model.device)
        prefill = lambda: model.prefill(frame.images, frame.image_mask, frame.prompt_tokens, k, k)  # noqa: E731
        self.matmuls = MatmulFloor.capture(prefill, model.device)
        self.matmul: list[float] = []
        # ... and the products inside its fused attention calls (scores and weighted values), beside them.
        self.attention_matmuls = MatmulFloor.capture(prefill, model.device, attention=True)
        self.attention_matmul: list[float] = []
        # The plain and the guided chunk's products alone: the floor of A_rtc ÷ A (bench/probes/rtc_floor.py).
        n = model.prefill(frame.images, frame.image_mask, frame.prompt_tokens, k, k).length
        with torch.inference_mode(False):  # a prefix autograd may save for the backward pass
            pk = k[:, :n].clone()
        noise, guide = workload.noise(model.config, 0), self.guide
        self.chunk_matmuls = MatmulFloor.capture(lambda: model.sample_actions(pk, pk, noise), model.device)
        self.rtc_matmuls = MatmulFloor.capture(lambda: sample_actions_rtc(
            model, pk, pk, noise, guide.target, guide.weights, guide.beta), model.device, grad=True)
        self.chunk_matmul: list[float] = []
        self.rtc_matmul: list[float] = []
        # The widest decode step's products alone, and of them the text head's (rows x vocabulary logits), the
        # floor of D beside the chunk, with the weights the step multiplies by (packed for oneDNN where the engine
        # packs them). A step replayed from a CUDA graph dispatches nothing: no floor there.
        self.decode_batch = max(batches, default=0)
        self.decode_matmuls = self.head_matmuls = None
        if self.decode_batch:
            floor = MatmulFloor.capture(self.decoders[self.decode_batch].decode_step, model.device)
            head = tuple(model.text_head_weight.shape)  # [vocabulary, width]: its product's second operand
            if floor.count:
                self.decode_matmuls = floor
                self.head_matmuls = floor.part(lambda args: len(args) > 1 and getattr(args[1], "shape", None) == head)
        self.decode_matmul: list[float] = []
        self.head_matmul: list[float] = []

    def sample(self, index: int) -> None:
        noise = self.workload.noise(self.model.config, index)
        frame = self.frames[index % len(self.frames)]
        eager, p_eager = self.engine.prefill(frame, prefiller=self.model.prefill)
        self.engine.kv.release(eager)
        prefix, p = self.engine.prefill(frame)
        _, a = self.engine.act(prefix, noise)
        _, a_eager = self.engine.act(prefix, noise, sampler=self.model.sample_actions)  # same lane, eager network
        _, a_rtc = self.engine.act(prefix, noise, self.guide)
        _, a_rtc_eager = self.engine.act(prefix, noise, self.guide, sampler=self.model.sample_actions)
        self.prefix_tokens = prefix.length
        self.engine.kv.release(prefix)
        self.prefill.append(p)
        self.matmul.append(self.matmuls.time_once())
        self.attention_matmul.append(self.attention_matmuls.time_once())
        self.chunk_matmul.append(self.chunk_matmuls.time_once())
        self.rtc_matmul.append(self.rtc_matmuls.time_once())
        self.prefill_eager.append(p_eager)
        self.action.append(a)
        self.action_eager.append(a_eager)
        self.action_rtc.append(a_rtc)
        self.action_rtc_eager.append(a_rtc_eager)
        for b, engine in self.decoders.items():
            t0 = time.perf_counter()
            engine.decode_step()
            _sync(self.model.device)
            self.decode[b].append(time.perf_counter() - t0)
        if self.decode_matmuls and self.head_matmuls:
            self.decode_matmul.append(self.decode_matmuls.time_once())
            self.head_matmul.append(self.head_matmuls.time_once())

    def result(self) -> dict:
        return {
            "prefill_s": statistics.median(self.prefill),
            "prefill_eager_s": statistics.median(self.prefill_eager),
            "prefill_matmul_s": statistics.median(self.matmul),
            "prefill_matmuls": self.matmuls.count,
            "prefill_matmul_gflop": self.matmuls.flops / 1e9,
            "prefill_attention_matmul_s": statistics.median(self.attention_matmul),
            "prefill_attention_matmuls": self.attention_matmuls.count,
            "prefill_attention_matmul_gflop": self.attention_matmuls.flops / 1e9,
            "prefill_fused": self.runtime.prefill_fused,
            "prefill_compile_s": self.runtime.prefill_compile_s,
            "action_s": statistics.median(self.action),
            "action_eager_s": statistics.median(self.action_eager),
            "action_rtc_s": statistics.median(self.action_rtc),
            "action_rtc_eager_s": statistics.median(self.action_rtc_eager),
            "action_matmul_s": statistics.median(self.chunk_matmul),
            "action_rtc_matmul_s": statistics.median(self.rtc_matmul),
            "action_matmul_gflop": self.chunk_matmuls.flops / 1e9,
            "action_rtc_matmul_gflop": self.rtc_matmuls.flops / 1e9,
            "rtc_compile_s": self.runtime.rtc_compile_s,
            "action_fused": self.runtime.fused,
            "action_path": self.runtime.path,
            "compile_s": self.runtime.compile_s,
            "decode_s": {str(b): statistics.median(t) for b, t in self.decode.items()},
            **({"decode_matmul_batch": self.decode_batch, "decode_matmul_s": statistics.median(self.decode_matmul),
                "decode_matmuls": self.decode_matmuls.count, "decode_matmuls_packed": self.decode_matmuls.packed,
                "decode_head_matmul_s": statistics.median(self.head_matmul)}
               if self.decode_matmul else {}),
            "prefix_tokens": self.prefix_tokens,
            "params": count_parameters(self.model),
        }


class _Point:
    """One (mode, N, k) point of the sweep: its runner and what its measured frames gave."""

    def __init__(self, workload: Workload, model, text_model, runtime: BenchRuntime | None, mode: str, n: int, k: int,  # noqa: ANN001
                 variant: str = "after") -> None:
        self.mode, self.n, self.k = mode, n, k
        self.variant = variant  # after | before (plain engine) | eager_prefill (this run's engine, eager prefill)
        self.engine = workload.engine(model, n, runtime, eager_prefill=variant == "eager_prefill")
        if mode == "parallel":  # the second worker: its own model copy and KV pool
            self.runner = ParallelRunner(self.engine, workload.engine(text_model, n))
        else:
            self.runner = make_runner(mode, self.engine, tokens_per_frame=k if mode == "oxygen" else 1)
        # oxygen needs ~N/k frames before as many requests are live as in steady state
        self.warmup = 2 + (math.ceil(n / k) if mode == "oxygen" else 0)
        self.index = 0
        self.frame_s: list[float] = []
        self.tokens: list[int] = []
        self.batches: list[int] = []
        self.tick_s: list[float] = []

    @property
    def label(self) -> str:
        label = f"{self.mode} N={self.n}" + (f" k={self.k}" if self.mode == "oxygen" else "")
        return label + {"after": "", "before": " (before)", "eager_prefill": " (eager prefill)"}[self.variant]

    def run(self, workload: Workload, frames: list, count: int, record_from: int) -> None:
        """Run ``count`` frames; those from the ``record_from``-th on are counted."""
        config = self.engine.config
        for i in range(count):
            report = self.runner.frame(frames[self.index % len(frames)], workload.noise(config, self.index))
            self.index += 1
            if i >= record_from:
                self.frame_s.append(report.frame_s)
                self.tokens.append(report.tokens)
                self.batches.append(self.engine.stats().last_decode_batch)
                self.tick_s.append(report.tick.prefill_s + report.tick.action_s)

    def record(self, horizon: int) -> dict:
        # The median frame: robust to the bursts of a shared machine (the mean follows them: frame_ms_mean).
        frame = statistics.median(self.frame_s)
        return {
            "mode": self.mode,
            "decode_len": self.n if self.mode != "action_only" else 0,
            "tokens_per_frame": (self.k if self.mode == "oxygen" else self.n) if self.mode != "action_only" else 0,
            "frames": len(self.frame_s),
            "frame_ms": 1e3 * frame,
            "frame_ms_mean": 1e3 * statistics.mean(self.frame_s),
            "action_hz": horizon / frame,
            "tokens_per_s": statistics.mean(self.tokens) / frame,
            "decode_batch": statistics.mean(self.batches) if self.mode == "oxygen" else None,
            "tick_ms": 1e3 * statistics.median(self.tick_s),
            "text_ms": 1e3 * (frame - statistics.median(self.tick_s)),
        }


def run_interleaved(workload: Workload, points: list[tuple[str, int, int]], frames_measured: int, block: int,
                    batches: list[int], before: list[tuple[str, int, int]] = (),  # type: ignore[assignment]
                    eager_prefill: list[tuple[str, int, int]] = ()) -> dict:  # type: ignore[assignment]
    """Every point of the sweep, and the parts, in rounds: each round runs a block of frames of every point in
    turn (the first frame of a block is not counted: it pays for the previous point's cache traffic). A slow
    spell of a shared machine then falls on every mode alike, so the ratios hold within one run."""
    model = workload.build_model()
    text_model = workload.build_model() if any(p[0] == "parallel" for p in points) else None
    frames = workload.frames(model.config)
    rounds = math.ceil(frames_measured / (block - 1))
    rss = status_kib("VmRSS")
    runtime = BenchRuntime(workload, model, _progress, rtc=True)
    compile_rss = (status_kib("VmRSS") - rss) * 1024
    probe = PartsProbe(workload, model, runtime, batches, rounds)
    sweep = [_Point(workload, model, text_model, runtime, *p) for p in points]
    # "before": the same points on a plain engine (eager action chunk, everything on the calling thread)
    baseline = [_Point(workload, model, text_model, None, *p, variant="before") for p in before]
    # "eager_prefill": the same points on this run's engine but for the prefill, which is the eager one
    unfused = [_Point(workload, model, text_model, runtime, *p, variant="eager_prefill") for p in eager_prefill]
    sweep += baseline + unfused
    for point in sweep:
        point.run(workload, frames, point.warmup, record_from=point.warmup)
        _progress(f"  warmed up {point.label} ({point.warmup} frames)")
    for r in range(rounds):
        for point in sweep:
            point.run(workload, frames, block, record_from=1)
        probe.sample(r)
        summary = ", ".join(f"{p.label} {statistics.median(p.frame_s) * 1e3:.0f} ms" for p in sweep)
        _progress(f"  round {r + 1}/{rounds}: {summary}")
    for point in sweep:
        point.runner.close()
    runtime.close()
    horizon = model.config.action_horizon
    parts = probe.result() | {"compile_rss_bytes": compile_rss}
    records = [p.record(horizon) for p in sweep if p.variant == "after"]
    return {"parts": parts, "records": records, "before": [p.record(horizon) for p in baseline],
            "eager_prefill": [p.record(horizon) for p in unfused]}


def measure_memory(workload: Workload, mode: str, sweep: list[tuple[int, int]]) -> list[int]:
    """Peak memory of points of one mode: warm-up to steady state, one frame. oxygen-bench runs one point per
    process: the tuned allocator keeps freed memory, so a process's earlier points would count too. (It passes
    the eager action network: compiling in every one of these processes would take minutes; the timing
    process reports what compiling adds.)"""
    device = torch.device(workload.device)
    memory = PeakMemory(device)
    model = workload.build_model()
    text_model = workload.build_model() if mode == "parallel" else None
    frames = workload.frames(model.config)
    runtime = BenchRuntime(workload, model, _progress)
    peaks = []
    for n, k in sweep:
        point = _Point(workload, model, text_model, runtime, mode, n, k)
        memory.reset()
        point.run(workload, frames, point.warmup + 1, record_from=point.warmup + 1)
        peaks.append(memory.peak_bytes())
        point.runner.close()
        _progress(f"  memory {point.label}: {peaks[-1] / 2**20:.0f} MiB")
    runtime.close()
    return peaks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one oxygen-bench worker (started by oxygen-bench)")
    parser.add_argument("--workload", required=True, help="JSON of the Workload fields")
    parser.add_argument("--task", choices=("timing", "memory"), required=True)
    parser.add_argument("--mode", help="memory: the engine mode")
    parser.add_argument("--points", default="[]", help="JSON list of [mode, decode_len, tokens_per_frame] (timing) "
                        "or [decode_len, tokens_per_frame] (memory)")
    parser.add_argument("--batches", default="[1, 10, 30]")
    parser.add_argument("--before", default="[]", help="timing: JSON points also run on a plain eager engine")
    parser.add_argument("--eager-prefill", default="[]", help="timing: JSON points also run with the eager prefill")
    parser.add_argument("--frames", type=int, default=12)
    parser.add_argument("--block", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    keep_freed_buffers()
    if args.threads:
        torch.set_num_threads(args.threads)
    workload = Workload(**json.loads(args.workload))
    points = [tuple(x) for x in json.loads(args.points)]
    if args.task == "timing":
        before = [tuple(x) for x in json.loads(args.before)]
        unfused = [tuple(x) for x in json.loads(args.eager_prefill)]
        result: object = run_interleaved(workload, points, args.frames, args.block, json.loads(args.batches), before,  # type: ignore[arg-type]
                                         unfused)  # type: ignore[arg-type]
    else:
        result = measure_memory(workload, args.mode, points)  # type: ignore[arg-type]
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
