"""``oxygen-bench --startup``: how long a robot waits from process start to its first chunk, cold and warm.

Each figure is one fresh process that does what the node does before its first chunk: import, build the model,
compile the action chunk and the prefill (``BenchRuntime``: the same ``make_action_sampler``/``make_prefiller``
with their warm-ups as ``PolicyRuntime.load``), then prefill one frame and sample one chunk. Both processes use
the same new inductor cache folder (``TORCHINDUCTOR_CACHE_DIR``): the first finds it empty (cold: every graph
compiled), the second finds what the first wrote (warm: a second start of the same configuration, the graphs
loaded from inductor's FX-graph and AOTAutograd caches).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict

import torch
from torch._dynamo.utils import counters

from oxygen_ros.runtime.startup import process_age_s

from .workload import BenchRuntime, Workload


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def first_chunk(workload: Workload) -> dict:
    """In this (fresh) process: everything up to the first chunk; returns its timings in seconds."""
    imported = process_age_s() or 0.0
    t0 = time.perf_counter()
    model = workload.build_model()
    built = time.perf_counter() - t0
    runtime = BenchRuntime(workload, model, _progress)
    engine = workload.engine(model, decode_len=1, runtime=runtime)
    frame = workload.frames(model.config)[0]
    result = engine.tick(frame, workload.noise(model.config, 0), tasks=[])
    age = process_age_s()
    runtime.close()
    caches = {f"{kind}_{what}": counters[group].get(f"{kind}_{what}", 0)
              for group, kind in (("inductor", "fxgraph_cache"), ("aot_autograd", "autograd_cache"))
              for what in ("hit", "miss")}
    return caches | {"first_chunk_s": age, "imports_s": imported, "build_s": built, "action_compile_s": runtime.compile_s,
            "prefill_compile_s": runtime.prefill_compile_s, "tick_s": result.prefill_s + result.action_s,
            "fused": runtime.fused and runtime.prefill_fused}


def run(workload: Workload, threads: int) -> dict:
    """A cold start (empty cache) then a warm one (the cache the cold one wrote), each in its own process."""
    cmd = [sys.executable, "-m", "oxygen_ros.bench.startup", "--workload", json.dumps(asdict(workload)),
           "--threads", str(threads)]
    out = {}
    with tempfile.TemporaryDirectory(prefix="oxygen-startup-") as cache:
        env = os.environ | {"TORCHINDUCTOR_CACHE_DIR": cache}
        for start in ("cold", "warm"):
            _progress(f"start-up: {start} (inductor cache {'empty' if start == 'cold' else 'from the cold start'}) ...")
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
            if proc.returncode != 0:
                raise SystemExit(f"oxygen-bench --startup: the {start} process failed (exit {proc.returncode})")
            out[start] = json.loads(proc.stdout)
    return out


def format_startup(result: dict, header: str) -> str:
    lines = [header, "", "start-up to the first chunk (one fresh process each; seconds):",
             f"{'start':>5} | {'first chunk':>11} | {'imports':>7} | {'model':>5} | {'chunk compile':>13} | "
             f"{'prefill compile':>15} | {'first tick':>10}"]
    for start in ("cold", "warm"):
        r = result[start]
        lines.append(f"{start:>5} | {r['first_chunk_s']:>11.1f} | {r['imports_s']:>7.1f} | {r['build_s']:>5.1f} | "
                     f"{r['action_compile_s'] or 0:>13.1f} | {r['prefill_compile_s'] or 0:>15.1f} | {r['tick_s']:>10.2f}")
    for start in ("cold", "warm"):
        r = result[start]
        lines.append(f"{start}: inductor FX graph cache {r['fxgraph_cache_hit']} hits, {r['fxgraph_cache_miss']} misses; "
                     f"AOTAutograd cache {r['autograd_cache_hit']} hits, {r['autograd_cache_miss']} misses")
    lines.append("cold: an empty inductor cache (every graph compiled); warm: a second start of the same "
                 "configuration, graphs loaded from the cache the cold start wrote")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one oxygen-bench --startup process (started by oxygen-bench)")
    parser.add_argument("--workload", required=True)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    json.dump(first_chunk(Workload(**json.loads(args.workload))), sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
