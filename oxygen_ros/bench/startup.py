"""``oxygen-bench --startup``: how long a robot waits from process start to its first chunk, cold and warm.

Each figure is one fresh process that does what the node does before its first chunk: import, build the model,
compile the action chunk and the prefill (``BenchRuntime``: the same ``make_action_sampler``/``make_prefiller``
with their warm-ups as ``PolicyRuntime.load``), then prefill one frame and sample one chunk. Both processes use
the same new inductor cache folder (``TORCHINDUCTOR_CACHE_DIR``): the first finds it empty (cold: every graph
compiled), the second finds what the first wrote (warm: a second start of the same configuration). A warm start
loads the ahead-of-time compiled functions (``model/backends/compiled_aot.py``) from that folder.

``--compare-caches`` adds the two other ways measured against them, with the artefacts off
(``OXYGEN_ROS_AOT_ARTEFACTS=0``: Dynamo traces every function again on a warm start): a cold start on a second
empty folder that also saves torch's portable cache bundle (``torch.compiler.save_cache_artifacts``, "MegaCache"),
a warm start on that folder (inductor's FX-graph and AOTAutograd caches), and a warm start on a third, empty
folder that first loads the bundle (``torch.compiler.load_cache_artifacts``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch._dynamo.utils import counters

from oxygen_ros.model.backends.compiled_aot import COUNTERS, artefacts_enabled
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
    caches |= {f"aot_{what}": counters[COUNTERS].get(what, 0) for what in ("loaded", "compiled", "failed")}
    return caches | {"first_chunk_s": age, "imports_s": imported, "build_s": built, "action_compile_s": runtime.compile_s,
            "prefill_compile_s": runtime.prefill_compile_s, "tick_s": result.prefill_s + result.action_s,
            "fused": runtime.fused and runtime.prefill_fused, "artefacts": artefacts_enabled()}


@dataclass(frozen=True)
class Start:
    """One fresh process: its row name, its cache folder (a key of ``run``'s folders), what it says it finds
    there, the artefacts on or off, and an extra argument of this module's ``main``."""

    name: str
    folder: str
    finds: str
    artefacts: bool = True
    extra: tuple[str, ...] = ()


def starts(compare: bool) -> list[Start]:
    out = [Start("cold", "a", "empty"), Start("warm", "a", "the cold start's artefacts")]
    if compare:
        out += [Start("cold, inductor only", "b", "empty; saves a MegaCache bundle", False, ("--save-megacache",)),
                Start("warm, inductor caches", "b", "the cold start's inductor caches", False),
                Start("warm, MegaCache", "c", "empty; loads the bundle first", False, ("--load-megacache",))]
    return out


def run(workload: Workload, threads: int, compare: bool = False) -> dict:
    """Each start in its own process, in order; the folders are new and empty at first."""
    cmd = [sys.executable, "-m", "oxygen_ros.bench.startup", "--workload", json.dumps(asdict(workload)),
           "--threads", str(threads)]
    out = {}
    with tempfile.TemporaryDirectory(prefix="oxygen-startup-") as root:
        bundle = str(Path(root) / "megacache.bin")
        for start in starts(compare):
            folder = Path(root) / start.folder
            env = os.environ | {"TORCHINDUCTOR_CACHE_DIR": str(folder),
                                "OXYGEN_ROS_AOT_ARTEFACTS": "1" if start.artefacts else "0"}
            _progress(f"start-up: {start.name} (cache folder: {start.finds}) ...")
            extra = [arg for flag in start.extra for arg in (flag, bundle)]
            proc = subprocess.run(cmd + extra, stdout=subprocess.PIPE, text=True, env=env)
            if proc.returncode != 0:
                raise SystemExit(f"oxygen-bench --startup: the {start.name} process failed (exit {proc.returncode})")
            out[start.name] = json.loads(proc.stdout)
    return out


def format_startup(result: dict, header: str) -> str:
    names = [start.name for start in starts(True) if start.name in result]
    width = max(len(n) for n in ["start", *names])
    lines = [header, "", "start-up to the first chunk (one fresh process each; seconds):",
             f"{'start':>{width}} | {'first chunk':>11} | {'imports':>7} | {'model':>5} | {'chunk compile':>13} | "
             f"{'prefill compile':>15} | {'first tick':>10}"]
    for name in names:
        r = result[name]
        lines.append(f"{name:>{width}} | {r['first_chunk_s']:>11.1f} | {r['imports_s']:>7.1f} | {r['build_s']:>5.1f} | "
                     f"{r['action_compile_s'] or 0:>13.1f} | {r['prefill_compile_s'] or 0:>15.1f} | {r['tick_s']:>10.2f}")
    for name in names:
        r = result[name]
        mega = f"; MegaCache bundle loaded in {r['megacache_load_s']:.1f} s" if "megacache_load_s" in r else ""
        lines.append(f"{name}: ahead-of-time artefacts {r['aot_loaded']} variants loaded, {r['aot_compiled']} compiled, "
                     f"{r['aot_failed']} failed; inductor FX graph cache {r['fxgraph_cache_hit']} hits, "
                     f"{r['fxgraph_cache_miss']} misses; AOTAutograd cache {r['autograd_cache_hit']} hits, "
                     f"{r['autograd_cache_miss']} misses{mega}")
    lines.append("cold: an empty cache folder (every graph compiled, saved as ahead-of-time artefacts); warm: a second "
                 "start of the same configuration on the folder the cold start wrote")
    if any(not result[n]["artefacts"] for n in names):
        lines.append("inductor only / inductor caches / MegaCache: artefacts off (OXYGEN_ROS_AOT_ARTEFACTS=0), Dynamo "
                     "traces every function again and inductor's caches (or the bundle loaded into them) serve the graphs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one oxygen-bench --startup process (started by oxygen-bench)")
    parser.add_argument("--workload", required=True)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--save-megacache", type=Path, help="after the first chunk: torch's cache bundle to this file")
    parser.add_argument("--load-megacache", type=Path, help="before the model: load torch's cache bundle from this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = {}
    if args.load_megacache:
        t0 = time.perf_counter()
        torch.compiler.load_cache_artifacts(args.load_megacache.read_bytes())
        loaded = {"megacache_load_s": time.perf_counter() - t0}
    result = first_chunk(Workload(**json.loads(args.workload))) | loaded
    if args.save_megacache:
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            raise SystemExit("torch.compiler.save_cache_artifacts saved nothing")
        args.save_megacache.write_bytes(saved[0])
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
