"""``oxygen-bench --robots 1,2,4,8``: one engine serving N robots against N separate one-robot processes.

Every robot runs the same workload: a frame every tick (prefill, action chunk, a ``language`` request of
``decode_len`` tokens) and ``k`` batched decode steps after it. Two ways to serve N robots on one machine:

* fleet: one process, one model copy, one engine; each tick all N robots' frames prefilled in one batched call
  (eager prefill), all their chunks in one batched call and all their text in the same decode steps (``Engine.tick_many``);
  with two or more threads it uses lanes: the batched prefill in two halves on two one-thread workers, and one
  of the k decode steps beside the chunks;
* separate: N processes started together, each its own model copy and a one-robot engine, the machine's
  threads split between them (lanes where a process gets two threads). They wait for one another at a barrier,
  then run for the same wall time.

Per N: aggregate chunks/s and tokens/s, per-robot action Hz, peak memory (sum over the processes), taken in
rounds that alternate the two so a slow spell of a shared machine falls on both; the medians are reported.
The parts P(B) (the prefill of B frames as the engine runs it: one batched call with the eager prefill), P1(B)
(B one-robot prefills), A(B) (one batched chunk) and D(B) (one decode step with B robots' requests) are
measured at each B in one process, so the gain on other hardware can be projected from their scaling.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from oxygen_ros.engine.allocator import keep_freed_buffers
from oxygen_ros.engine.policy import FixedTokensPolicy

from .memory import PeakMemory
from .workload import BenchRuntime, Workload

WARMUP_FRAMES = 3


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _names(n: int) -> list[str]:
    return [""] + [f"robot{i}" for i in range(1, n)]


class FleetLoop:
    """N robots on one engine: a frame each per tick, then k decode steps."""

    def __init__(self, workload: Workload, robots: int, decode_len: int, k: int, runtime: BenchRuntime | None = None,
                 model=None) -> None:  # noqa: ANN001
        self.workload = workload
        self.model = model or workload.build_model()
        self.runtime = runtime or BenchRuntime(workload, self.model, _progress)
        self.engine = workload.engine(self.model, decode_len, self.runtime)
        self.names = _names(robots)
        for name in self.names[1:]:
            self.engine.add_robot(name)
        self.frames = workload.frames(self.model.config)
        # With lanes one of the k decode steps runs beside the chunks (tick_many's decode_during_action).
        self.overlap = self.engine.lanes is not None
        after = k - 1 if self.overlap else k
        self.decoder = FixedTokensPolicy(after) if after else None
        self.index = 0

    def tick(self) -> tuple[int, int]:
        """One tick of every robot; returns (chunks, text tokens)."""
        cfg = self.model.config
        frames = {n: self.frames[(self.index + i) % len(self.frames)] for i, n in enumerate(self.names)}
        noise = {n: self.workload.noise(cfg, self.index * len(self.names) + i) for i, n in enumerate(self.names)}
        self.index += 1
        results = self.engine.tick_many(frames, noise, decode_during_action=self.overlap)
        events = [e for r in results.values() for e in r.events] + (self.decoder.run(self.engine) if self.decoder else [])
        return len(results), sum(len(e.token_ids) for e in events)


def _measure(loop: FleetLoop, seconds: float, frames: int) -> dict:
    chunks = tokens = 0
    tick_s: list[float] = []
    start = time.perf_counter()
    while len(tick_s) < frames and time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        c, t = loop.tick()
        tick_s.append(time.perf_counter() - t0)
        chunks, tokens = chunks + c, tokens + t
    wall = time.perf_counter() - start
    return {"chunks": chunks, "tokens": tokens, "wall_s": wall, "ticks": len(tick_s),
            "tick_ms_median": 1e3 * statistics.median(tick_s)}


def _worker(args: argparse.Namespace) -> dict:
    """One process: the fleet engine (``--robots N``) or one separate robot (``--robots 1`` with a barrier)."""
    keep_freed_buffers()
    if args.threads:
        torch.set_num_threads(args.threads)
    workload = Workload(**json.loads(args.workload))
    memory = PeakMemory(torch.device(workload.device))  # baseline before the model exists
    loop = FleetLoop(workload, args.robots, args.decode_len, args.k)
    for _ in range(WARMUP_FRAMES + args.decode_len):
        loop.tick()
    if args.barrier:
        Path(args.barrier, f"ready.{os.getpid()}").touch()
        while not Path(args.barrier, "go").exists():
            time.sleep(0.01)
    result = _measure(loop, args.seconds, args.frames)
    result["peak_mem_bytes"] = memory.peak_bytes()
    result["action_path"] = loop.runtime.path
    return result


def _spawn(workload: Workload, robots: int, threads: int, args: argparse.Namespace, barrier: str = "") -> subprocess.Popen:
    cmd = [sys.executable, "-m", "oxygen_ros.bench.fleet", "--worker", "--workload", json.dumps(asdict(workload)),
           "--robots", str(robots), "--threads", str(threads), "--decode-len", str(args.decode_len), "--k", str(args.k),
           "--seconds", str(args.seconds), "--frames", str(args.frames)]
    if barrier:
        cmd += ["--barrier", barrier]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def _collect(procs: list[subprocess.Popen]) -> list[dict]:
    out = []
    for proc in procs:
        stdout, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"oxygen-bench --robots: a worker failed (exit {proc.returncode}); see its output above")
        out.append(json.loads(stdout))
    return out


def run_fleet(workload: Workload, n: int, threads: int, args: argparse.Namespace) -> dict:
    r = _collect([_spawn(workload, n, threads, args)])[0]
    return {"chunks_per_s": r["chunks"] / r["wall_s"], "tokens_per_s": r["tokens"] / r["wall_s"],
            "peak_mem_bytes": r["peak_mem_bytes"], "tick_ms": r["tick_ms_median"], "action_path": r["action_path"]}


def run_separate(workload: Workload, n: int, threads: int, args: argparse.Namespace) -> dict:
    """N one-robot processes started together; measured from a common start (a barrier) for the same time."""
    with tempfile.TemporaryDirectory(prefix="oxygen-fleet-") as barrier:
        procs = [_spawn(workload, 1, threads, args, barrier) for _ in range(n)]
        while len(list(Path(barrier).glob("ready.*"))) < n:
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.05)
        Path(barrier, "go").touch()
        results = _collect(procs)
    return {"chunks_per_s": sum(r["chunks"] / r["wall_s"] for r in results),
            "tokens_per_s": sum(r["tokens"] / r["wall_s"] for r in results),
            "peak_mem_bytes": sum(r["peak_mem_bytes"] for r in results),
            "tick_ms": statistics.median(r["tick_ms_median"] for r in results)}


def measure_parts(workload: Workload, batches: list[int], decode_len: int, rounds: int) -> dict:
    """P(B): the prefill of B robots' frames as ``tick_many`` runs it (``Engine.prefill_many``: one batched
    call, or one by one where the prefiller has no batched form); P1(B): B one-robot prefills one after the
    other (what P was before the batched prefill); A(B): one batched chunk over B prefixes; D(B): one decode
    step with one live request per robot of B. Medians over ``rounds``, the batch sizes interleaved within each
    round."""
    loop = FleetLoop(workload, max(batches), decode_len, 1)
    engine, cfg = loop.engine, loop.model.config
    times: dict[str, dict[int, list[float]]] = {p: {b: [] for b in batches} for p in ("P", "P1", "A", "D")}
    decoders = {}
    for b in batches:  # B robots, each with one request that outlasts every round
        dec = FleetLoop(workload, b, rounds + 4, 1, loop.runtime, loop.model)
        dec.engine.tick_many({n: dec.frames[i % len(dec.frames)] for i, n in enumerate(dec.names)})
        dec.engine.decode_step()  # feeds the continuation prompts
        decoders[b] = dec.engine
    for r in range(rounds + 1):  # the first round warms up (first calls at each batch size)
        for b in batches:
            frames = {n: loop.frames[i % len(loop.frames)] for i, n in enumerate(loop.names[:b])}
            t0 = time.perf_counter()
            for prefix in [engine.prefill(frame, n)[0] for n, frame in frames.items()]:
                engine.kv.release(prefix)
            p1 = time.perf_counter() - t0
            t0 = time.perf_counter()
            prefixes = list(engine.prefill_many(frames)[0].values())
            p = time.perf_counter() - t0
            noise = torch.stack([workload.noise(cfg, i) for i in range(b)])
            _, a = engine.act_batch(prefixes, noise)
            for prefix in prefixes:
                engine.kv.release(prefix)
            t0 = time.perf_counter()
            decoders[b].decode_step()
            d = time.perf_counter() - t0
            if r:
                for part, value in (("P", p), ("P1", p1), ("A", a), ("D", d)):
                    times[part][b].append(value)
    medians = {part: {str(b): statistics.median(v) for b, v in by_b.items()} for part, by_b in times.items()}
    return medians | {"prefill": "batched" if engine.batches_prefill else "one by one"}


def run(args: argparse.Namespace, workload: Workload) -> dict:
    cores = os.cpu_count() or 1
    robots = [int(x) for x in args.robots.split(",")]
    rows: dict[int, dict[str, list[dict]]] = {n: {"fleet": [], "separate": []} for n in robots}
    for rep in range(args.repeats):
        for n in robots:
            _progress(f"[round {rep + 1}/{args.repeats}] {n} robot(s): one engine ...")
            threads = args.threads or cores
            rows[n]["fleet"].append(run_fleet(_with_lanes(workload, threads), n, threads, args))
            split = max(1, threads // n)
            _progress(f"[round {rep + 1}/{args.repeats}] {n} robot(s): {n} separate processes, {split} thread(s) each ...")
            rows[n]["separate"].append(run_separate(_with_lanes(workload, split), n, split, args) | {"threads_each": split})
    _progress("parts P, A, D at each batch size ...")
    parts = _run_parts(_with_lanes(workload, args.threads or cores), robots, args)
    return {"robots": robots, "rows": {str(n): v for n, v in rows.items()}, "parts": parts}


def _with_lanes(workload: Workload, threads: int) -> Workload:
    """Lanes (two one-thread workers: the fleet prefill in two halves, a decode step beside the chunks) for a
    process that has at least two threads and a workload that allows them; none for a one-thread process."""
    return replace(workload, lanes=workload.lanes and threads >= 2)


def _run_parts(workload: Workload, robots: list[int], args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "oxygen_ros.bench.fleet", "--worker", "--parts", ",".join(map(str, robots)),
           "--workload", json.dumps(asdict(workload)), "--threads", str(args.threads or (os.cpu_count() or 1)),
           "--decode-len", str(args.decode_len), "--frames", str(args.frames)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit("oxygen-bench --robots: the parts worker failed; see its output above")
    return json.loads(proc.stdout)


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def format_table(result: dict, horizon: int, header: str) -> str:
    lines = [header, "",
             f"{'robots':>6} | {'way':>8} | {'chunks/s':>8} | {'per-robot Hz':>12} | {'tokens/s':>8} | "
             f"{'per-robot tok/s':>15} | {'peak MiB':>8} | {'tick ms':>7}"]
    ratios = []
    for n in result["robots"]:
        row = result["rows"][str(n)]
        for way in ("fleet", "separate"):
            rs = row[way]
            cps = _median(rs, "chunks_per_s")
            tps = _median(rs, "tokens_per_s")
            lines.append(f"{n:>6} | {way:>8} | {cps:>8.2f} | {cps / n * horizon:>12.1f} | {tps:>8.1f} | {tps / n:>15.1f} | "
                         f"{_median(rs, 'peak_mem_bytes') / 2**20:>8.0f} | "
                         f"{_median(rs, 'tick_ms'):>7.0f}")
        f, s = row["fleet"], row["separate"]
        ratios.append(f"{n} robots: fleet/separate chunks/s {_median(f, 'chunks_per_s') / _median(s, 'chunks_per_s'):.2f}x, "
                      f"tokens/s {_median(f, 'tokens_per_s') / max(_median(s, 'tokens_per_s'), 1e-9):.2f}x, "
                      f"peak memory {_median(f, 'peak_mem_bytes') / _median(s, 'peak_mem_bytes'):.2f}x")
    parts = result["parts"]
    how = {"batched": "one batched call", "one by one": "one by one: this prefill has no batched form"}
    lines += ["", *ratios, "", f"parts (median ms; P = the prefill of B frames ({how[parts['prefill']]}), "
              "P1 = B one-robot prefills, A = one batched chunk, D = one decode step):",
              f"{'B':>3} | {'P(B)':>8} | {'P/B':>7} | {'P1(B)':>8} | {'P/P1':>5} | {'A(B)':>7} | {'A/B':>6} | {'D(B)':>6}"]
    for b in result["robots"]:
        p, p1, a, d = (1e3 * parts[x][str(b)] for x in ("P", "P1", "A", "D"))
        lines.append(f"{b:>3} | {p:>8.1f} | {p / b:>7.1f} | {p1:>8.1f} | {p / p1:>5.2f} | {a:>7.1f} | {a / b:>6.1f} | "
                     f"{d:>6.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one oxygen-bench --robots worker (started by oxygen-bench)")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--workload", required=True)
    parser.add_argument("--robots", type=int, default=1)
    parser.add_argument("--parts", help="measure P, A, D at these batch sizes instead")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--decode-len", type=int, default=10)
    parser.add_argument("--k", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--barrier", default="")
    args = parser.parse_args(argv)
    if args.parts:
        keep_freed_buffers()
        if args.threads:
            torch.set_num_threads(args.threads)
        workload = Workload(**json.loads(args.workload))
        batches = [int(x) for x in args.parts.split(",")]
        result = measure_parts(workload, batches, args.decode_len, max(3, min(args.frames, 8)))
    else:
        result = _worker(args)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
