"""What the decode lane costs the action chunk beside it, and the chunk the decode lane.

With lanes, ``oxygen`` runs a frame's decode step on its own thread while the action chunk runs on another,
so its frame is P + the longer of A' and D': the chunk and the decode step as they run side by side. What
``oxygen`` loses against ``action_only`` (P + A) is how much longer that is than A alone. This tool times, in
one process and through the engine's own lanes:

* A alone (the other core idle);
* A beside a process that keeps the other core busy with integer arithmetic only (next to no memory
  traffic): what sharing the processor costs by itself;
* A beside back-to-back decode steps of ``--live`` requests (the text head reads every logit's weights at
  every step): what the decode lane costs the chunk;
* D alone on its lane and beside back-to-back chunks, and P;
* one chunk and one decode step started together, each on its lane, until both are done: the two lanes of an
  ``oxygen`` frame at k = 1 as it runs them.

Every decode figure is taken twice on the same requests: with the weights packed for oneDNN (where the
engine packed them: bfloat16 on a CPU, ``model/network/packed_decode.py``) and with the plain weights. For each it
prints the share of ``action_only``'s rate that ``oxygen`` could keep if nothing else cost it: from the frame's
two lanes started together, and beside it the same share from the longer of A and D, each beside the other
running back to back (where D is shorter than A one step does not cover the whole chunk, so this second figure
charges the chunk more than a frame does).

    python -m oxygen_ros.bench.probes.lane_contention [--preset bench] [--live 30] [--rounds 5] [--samples 9]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import torch

from oxygen_ros.engine.lanes import Lane

from oxygen_ros.bench.fleet import FleetLoop
from oxygen_ros.bench.machine import describe, machine_info
from oxygen_ros.bench.workload import Workload, bf16_supported

ARITHMETIC_ONLY = "x = 0\nwhile True:\n    x = (x * 3 + 1) & 0xFFFF\n"  # one core busy, its data in registers


def _median_ms(fn: Callable[[], float], samples: int) -> float:
    return statistics.median(fn() for _ in range(samples)) * 1e3


class _Repeating:
    """``fn`` back to back on one of the engine's lanes until the block ends or ``fn`` returns something falsy
    (no decode step left to run): the load beside a timed call."""

    def __init__(self, lane: Lane, fn: Callable[[], object]) -> None:
        self.lane, self.fn = lane, fn
        self.stop = threading.Event()
        self.calls = 0

    def _run(self) -> None:
        while not self.stop.is_set() and self.fn():
            self.calls += 1

    def __enter__(self) -> "_Repeating":
        self.future = self.lane.submit(self._run)
        while self.calls == 0 and not self.future.done():  # loaded before the other lane is timed
            time.sleep(0.001)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.future.result()


class _ArithmeticProcess:
    def __enter__(self) -> "_ArithmeticProcess":
        self.process = subprocess.Popen([sys.executable, "-c", ARITHMETIC_ONLY])
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oxygen_ros.bench.probes.lane_contention",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"),
                        default="bfloat16" if bf16_supported("cpu") else "float32")
    parser.add_argument("--actions", choices=("auto", "compiled", "eager"), default="auto",
                        help="the action chunk's path (auto: compiled, as the node runs it on a CPU)")
    parser.add_argument("--live", type=int, default=30, help="live text requests in each decode step (oxygen's N)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=9, help="timed calls per figure and round (the median)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch threads of the prefill (the lanes have one each), as oxygen-bench")
    args = parser.parse_args(argv)
    if min(args.live, args.rounds, args.samples, args.threads) < 1:
        parser.error("--live, --rounds, --samples and --threads must be at least 1")
    torch.set_num_threads(args.threads)
    machine = describe(machine_info("cpu", 1))
    if (os.cpu_count() or 1) < 2:
        print("note: one CPU core: the lanes share it, so every figure beside something is time-sliced")
    # Requests long enough to outlast every round (at the bench preset a round takes about 3 x --samples
    # decode steps; a smaller model more), so the live batch stays at --live; the KV budget holds that many
    # prefixes and their full text.
    max_tokens = args.live + 400
    config = Workload(args.preset, "cpu", args.dtype).model_config()
    b = config.backbone
    token_bytes = b.depth * b.num_kv_heads * b.head_dim * 2 * torch.finfo(getattr(torch, args.dtype)).bits // 8
    kv_mb = math.ceil(1.25 * (args.live + 2) * (config.max_prefix_tokens + max_tokens) * token_bytes / 2**20)
    workload = Workload(args.preset, "cpu", args.dtype, actions=args.actions, lanes=True, kv_budget_mb=max(96, kv_mb))
    loop = FleetLoop(workload, 1, max_tokens, 1)
    engine = loop.engine
    print(f"starting {args.live} text requests (one frame each) ...", flush=True)
    for _ in range(args.live):
        loop.tick()
    prefix, _ = engine.prefill(loop.frames[0])
    noise = workload.noise(engine.config, 0)

    def chunk() -> float:
        return engine.act(prefix, noise)[1]

    def decode() -> float:
        t0 = time.perf_counter()
        engine.lanes.decode.run(engine.decode_step)
        return time.perf_counter() - t0

    def prefill() -> float:
        out, seconds = engine.prefill(loop.frames[1])
        engine.kv.release(out)
        return seconds

    pool, lanes = engine.kv.pool, engine.lanes
    k, v = pool.view_k(prefix.extent), pool.view_v(prefix.extent)

    def together() -> float:
        """A chunk and one decode step started at once, each on its lane (an oxygen frame's two lanes, k = 1)."""
        t0 = time.perf_counter()
        side = lanes.decode.submit(engine.decode_step)
        engine.act(prefix, noise)
        side.result()
        return time.perf_counter() - t0

    def beside_decode() -> _Repeating:
        return _Repeating(lanes.decode, engine.decode_step)  # returns no events once no request is live

    def beside_chunks() -> _Repeating:
        return _Repeating(lanes.action, lambda: engine.sample_actions(k, v, noise) is not None)

    d_label = f"D({args.live})"
    # The decode step with the weights packed for oneDNN (the engine's default where it packed them) and with
    # the plain weights, on the same requests: the packing's effect side by side.
    weights = ["packed", "plain"] if engine.packed_decode_bytes else ["plain"]

    def with_weights(kind: str, make: Callable[[], float] | Callable[[], _Repeating]):  # noqa: ANN202
        def run():  # noqa: ANN202
            engine.packed_decode = kind == "packed"
            return make()
        return run

    plan: dict[str, tuple[Callable[[], float], Callable[[], object] | None]] = {  # timed, and what runs beside it
        "A alone": (chunk, None),
        "A beside an arithmetic-only process": (chunk, _ArithmeticProcess),
    }
    for kind in weights:
        plan[f"A beside decode steps ({kind} weights)"] = (chunk, with_weights(kind, beside_decode))
        plan[f"{d_label} alone ({kind})"] = (with_weights(kind, decode), None)
        plan[f"{d_label} beside chunks ({kind})"] = (with_weights(kind, decode), beside_chunks)
        plan[f"A with one {d_label} ({kind})"] = (with_weights(kind, together), None)
    plan["P"] = (prefill, None)
    rounds: dict[str, list[float]] = {label: [] for label in plan}
    try:
        for r in range(args.rounds):
            for label, (timed, load) in plan.items():
                if load is None:
                    rounds[label].append(_median_ms(timed, args.samples))
                else:
                    with load():  # type: ignore[attr-defined]
                        rounds[label].append(_median_ms(timed, args.samples))
            print(f"round {r + 1}: " + "   ".join(f"{label} {times[-1]:.1f} ms" for label, times in rounds.items()),
                  flush=True)
        live = engine.live_requests
    finally:
        engine.kv.release(prefix)
        loop.runtime.close()
    ms = {label: statistics.median(times) for label, times in rounds.items()}
    alone, arithmetic, p = ms["A alone"], ms["A beside an arithmetic-only process"], ms["P"]
    print(f"machine: {machine}; preset {args.preset}, {args.dtype}, actions {loop.runtime.path}, {live} live "
          f"requests, medians of {args.rounds} rounds; decode weights packed for oneDNN: "
          f"{engine.packed_decode_bytes / 2**20:.0f} MB")
    print(f"A alone {alone:.1f} ms; beside an arithmetic-only process {arithmetic:.1f} ms ({arithmetic / alone - 1:+.0%})")
    for kind in weights:
        a_beside = ms[f"A beside decode steps ({kind} weights)"]
        d_alone, d_beside = ms[f"{d_label} alone ({kind})"], ms[f"{d_label} beside chunks ({kind})"]
        both = ms[f"A with one {d_label} ({kind})"]
        print(f"{kind} decode weights: A beside decode steps {a_beside:.1f} ms ({a_beside / alone - 1:+.0%}); "
              f"{d_label} alone {d_alone:.1f} ms, beside chunks {d_beside:.1f} ms ({d_beside / d_alone - 1:+.0%}); "
              f"A and one {d_label} started together {both:.1f} ms ({both / alone - 1:+.0%} on A alone); "
              f"oxygen could keep at most {(p + alone) / (p + both):.0%} of action_only's rate "
              f"({(p + alone) / (p + max(a_beside, d_beside)):.0%} from each beside the other back to back)")
    print(f"P {p:.1f} ms. The ceiling at N = {args.live}, k = 1: (P + A alone) / (P + A and {d_label} started "
          "together); the figure in brackets takes the longer of A and D, each beside the other running back to back")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
