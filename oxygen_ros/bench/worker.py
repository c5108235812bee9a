"""One benchmark worker process: the cost of each part, or one mode over the whole sweep.

Each mode runs in its own process so its peak memory is its own; the parent compares them side by side.
Progress goes to stderr, the result as one JSON document on stdout.
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
from oxygen_ros.engine.allocator import keep_freed_buffers

from .memory import PeakMemory
from .workload import Workload


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def measure_parts(workload: Workload, batches: list[int], repeats: int) -> dict:
    """P (one prefill), A (one action chunk) and D(B) (one batched decode step at batch B), medians."""
    model = workload.build_model()
    config = model.config
    engine = workload.engine(model, decode_len=repeats + 4)  # requests must not finish while being timed
    frames = workload.frames(config)
    prefill, action = [], []
    for i in range(repeats + 1):
        prefix, p = engine.prefill(frames[i % len(frames)])
        _, a = engine.act(prefix, workload.noise(config, i))
        engine.kv.release(prefix)
        if i:  # the first call warms up
            prefill.append(p)
            action.append(a)
    decode = {}
    for b in batches:
        prefix, _ = engine.prefill(frames[0])
        engine.start_requests(prefix, frames[0], engine.tasks * b)
        engine.kv.release(prefix)
        if engine.live_requests != b:
            raise RuntimeError(f"parts: only {engine.live_requests} of {b} requests fit the KV budget")
        engine.decode_step()  # feeds the continuation prompts
        engine.decode_step()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            engine.decode_step()
            _sync(model.device)
            times.append(time.perf_counter() - t0)
        decode[str(b)] = statistics.median(times)
        engine.cancel_all()
        _progress(f"  parts: D({b}) = {decode[str(b)] * 1e3:.1f} ms")
    parts = {
        "prefill_s": statistics.median(prefill),
        "action_s": statistics.median(action),
        "decode_s": decode,
        "prefix_tokens": prefix.length,
        "params": sum(p.numel() for p in model.parameters()),
    }
    _progress(f"  parts: P = {parts['prefill_s'] * 1e3:.1f} ms, A = {parts['action_s'] * 1e3:.1f} ms")
    return parts


def run_mode(workload: Workload, mode: str, sweep: list[tuple[int, int]], frames_measured: int) -> list[dict]:
    """Every (decode_len N, tokens_per_frame k) point of the sweep for one mode."""
    device = torch.device(workload.device)
    memory = PeakMemory(device)
    model = workload.build_model()
    config = model.config
    frames = workload.frames(config)
    records = []
    for n, k in sweep:
        engine = workload.engine(model, n)
        runner = make_runner(mode, engine, tokens_per_frame=k if mode == "oxygen" else 1)
        # oxygen needs ~N/k frames before as many requests are live as in steady state
        warmup = 2 + (math.ceil(n / k) if mode == "oxygen" else 0)
        total = warmup + frames_measured
        memory.reset()
        frame_s, tokens, batches, decode_s, parts_s = [], 0, [], [], []
        for i in range(total):
            report = runner.frame(frames[i % len(frames)], workload.noise(config, i))
            if i >= warmup:
                frame_s.append(report.frame_s)
                tokens += report.tokens
                stats = engine.stats()
                batches.append(stats.last_decode_batch)
                parts_s.append(report.tick.prefill_s + report.tick.action_s)
                decode_s.append(report.frame_s - report.tick.prefill_s - report.tick.action_s)
            label = f"[{mode} N={n}" + (f" k={k}" if mode == "oxygen" else "") + "]"
            _progress(f"  {label} frame {i + 1}/{total}: {report.frame_s * 1e3:.0f} ms")
        peak = memory.peak_bytes()
        runner.close()
        elapsed = sum(frame_s)
        records.append(
            {
                "mode": mode,
                "decode_len": n if mode != "action_only" else 0,
                "tokens_per_frame": (k if mode == "oxygen" else n) if mode != "action_only" else 0,
                "frames": len(frame_s),
                "frame_ms": 1e3 * elapsed / len(frame_s),
                "frame_ms_median": 1e3 * statistics.median(frame_s),
                "action_hz": config.action_horizon * len(frame_s) / elapsed,
                "tokens_per_s": tokens / elapsed,
                "peak_mem_bytes": peak,
                "decode_batch": statistics.mean(batches) if mode == "oxygen" else None,
                "tick_ms": 1e3 * statistics.mean(parts_s),
                "text_ms": 1e3 * statistics.mean(decode_s),
            }
        )
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one oxygen-bench worker (started by oxygen-bench)")
    parser.add_argument("--workload", required=True, help="JSON of the Workload fields")
    parser.add_argument("--mode", required=True, help="'parts' or an engine mode")
    parser.add_argument("--sweep", default="[]", help="JSON list of [decode_len, tokens_per_frame]")
    parser.add_argument("--batches", default="[1, 10, 30]")
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    keep_freed_buffers()
    if args.threads:
        torch.set_num_threads(args.threads)
    workload = Workload(**json.loads(args.workload))
    if args.mode == "parts":
        result: object = measure_parts(workload, json.loads(args.batches), repeats=max(3, args.frames // 2))
    else:
        result = run_mode(workload, args.mode, [tuple(x) for x in json.loads(args.sweep)], args.frames)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
