"""``oxygen-bench``'s sweep: reproduce the OxyGen comparison side by side in one run.

Every mode runs on the same model (same seed, same weights), the same observations and the same noise. The
timing of all modes (and of the parts P, A, D(B)) is taken in one process, interleaved in rounds, so a slow
spell of a shared machine falls on every mode alike; each mode's peak memory is then measured in a process of
its own. Ratios are computed within the run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from . import fleet, startup
from .machine import describe, load_average, machine_info
from .report import add_comparisons, format_table, write_outputs
from .workload import Workload, bf16_supported

FULL_LENGTHS = (5, 10, 20, 30)
FULL_K = (1, 5)
QUICK_LENGTHS = (5, 30)
QUICK_K = (1,)


def _points(modes: list[str], lengths: tuple[int, ...], ks: tuple[int, ...]) -> list[tuple[str, int, int]]:
    """(mode, decode length N, tokens per frame k) for every point of the sweep."""
    points = [("action_only", 0, 1)] if "action_only" in modes else []
    for n in lengths:
        for mode in ("sequential", "parallel", "shared"):
            if mode in modes:
                points.append((mode, n, n))
        if "oxygen" in modes:
            points += [("oxygen", n, k) for k in ks]
    return points


def _run_worker(workload: Workload, args: list[str], what: str) -> object:
    cmd = [sys.executable, "-m", "oxygen_ros.bench.worker", "--workload", json.dumps(asdict(workload)), *args]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # progress streams through stderr
    if proc.returncode != 0:
        raise SystemExit(f"oxygen-bench: the {what} worker failed (exit {proc.returncode}); see its output above")
    return json.loads(proc.stdout)


def _command(argv: list[str], out: Path) -> str:
    """The command line as run, with the output folder by its name only (no machine paths in the record)."""
    return "oxygen-bench " + " ".join(out.name if a == str(out) else a for a in argv)


def _fleet(args: argparse.Namespace, workload: Workload, machine: dict, argv: list[str] | None) -> int:
    """``--robots``: one engine serving N robots against N separate processes (``bench/fleet.py``)."""
    args.k = 1
    # --quick: one short round and 3 rounds of the parts (a check that it runs, not a measurement)
    args.frames = args.frames or (3 if args.quick else 1000)
    args.seconds = args.seconds or (2.0 if args.quick else 20.0)
    args.repeats = args.repeats or (1 if args.quick else 3)
    header = (f"oxygen-bench --robots {args.robots}: preset {args.preset}, {args.device}, {workload.dtype}, "
              f"H={args.horizon}, {args.denoise_steps} denoising steps, text {args.decode_len} tokens per robot per "
              f"frame, 1 decode step per tick, actions {args.actions}, prefill {args.prefill}, {args.seconds:.0f} s per run, "
              f"{args.repeats} rounds (medians)\nmachine: {describe(machine)}")
    print(header, file=sys.stderr, flush=True)
    result = fleet.run(args, workload)
    return _report(args, workload, machine, argv, result, fleet.format_table(result, args.horizon, header), "fleet")


def _startup(args: argparse.Namespace, workload: Workload, machine: dict, argv: list[str] | None) -> int:
    """``--startup``: process start to the first chunk, cold and warm (``bench/startup.py``)."""
    header = (f"oxygen-bench --startup: preset {args.preset}, {args.device}, {workload.dtype}, actions {args.actions}, "
              f"prefill {args.prefill}\nmachine: {describe(machine)}")
    print(header, file=sys.stderr, flush=True)
    result = startup.run(workload, args.threads, args.compare_caches)
    return _report(args, workload, machine, argv, result, startup.format_startup(result, header), "startup")


def _report(args: argparse.Namespace, workload: Workload, machine: dict, argv: list[str] | None, result: dict,
            table: str, name: str) -> int:
    """Print a table with the load averages; with ``--out`` write ``<name>.json`` (result and record) and the table."""
    machine["load_average_at_end"] = load_average()
    print(table)
    print(f"(load average at start {machine['load_average_at_start']}, at end {machine['load_average_at_end']})")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        meta = {"machine": machine, "workload": asdict(workload),
                "command": _command(argv if argv is not None else sys.argv[1:], args.out)}
        (args.out / f"{name}.json").write_text(json.dumps(result | meta, indent=1))
        (args.out / f"{name}.txt").write_text(table + "\n")
        print(f"wrote {args.out / f'{name}.txt'}")
    return 0


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Run a parsed ``oxygen-bench`` command line (``oxygen_ros.bench.cli`` reads it without torch)."""
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda requested but CUDA is not available")
    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if bf16_supported(args.device) else "float32")
    lengths = tuple(args.lengths or (QUICK_LENGTHS if args.quick else FULL_LENGTHS))
    ks = tuple(args.ks or (QUICK_K if args.quick else FULL_K))
    frames = args.frames or (6 if args.quick else 12)
    workload = Workload(args.preset, args.device, dtype, args.horizon, args.denoise_steps, actions=args.actions,
                        prefill=args.prefill, lanes=args.lanes, kv_budget_mb=args.kv_budget_mb)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if args.threads:
        torch.set_num_threads(args.threads)  # so the record shows what the workers use
    machine = machine_info(args.device, 1 if args.lanes else None)
    if args.startup:
        return _startup(args, workload, machine, argv)
    if args.robots:
        return _fleet(args, workload, machine, argv)  # lanes where a process has two threads (bench/fleet.py)

    header = (
        f"oxygen-bench: preset {args.preset}, {args.device}, {dtype}, H={args.horizon}, "
        f"{args.denoise_steps} denoising steps, N in {list(lengths)}, k in {list(ks)}, {frames} measured frames, "
        f"actions {args.actions}, prefill {args.prefill}, lanes {'on' if args.lanes else 'off'}\nmachine: {describe(machine)}"
    )
    print(header, file=sys.stderr, flush=True)
    started = time.monotonic()
    batches = sorted({1, 10, 30} | {max(1, -(-n // k)) for n in lengths for k in ks})
    thread_args = ["--threads", str(args.threads)] if args.threads else []
    points = _points(args.modes, lengths, ks)
    # parallel mode runs torch from two threads; their OpenMP teams then slow every other mode in the same
    # process about 2x (measured), so it is timed in a process of its own, not interleaved with the rest.
    groups = [[p for p in points if p[0] != "parallel"], [p for p in points if p[0] == "parallel"]]
    steps = 1 + len(args.modes)
    parts: dict = {}
    by_point: dict = {}
    baseline: list = []
    unfused: list = []
    for group in (g for g in groups if g):
        isolated = group[0][0] == "parallel"
        print(f"[1/{steps}] timing: {len(group)} points" + (" of parallel mode" if isolated else " and the parts, interleaved")
              + " in one process", file=sys.stderr, flush=True)
        probe = [] if isolated else batches  # the parts come from the interleaved process
        compared = [p for p in group if p[0] == "action_only" or (p[0] == "oxygen" and p[1] == max(lengths))]
        before = compared if args.before and not isolated else []
        eager_prefill = compared if args.eager_prefill and not isolated else []
        timing = _run_worker(workload, ["--task", "timing", "--points", json.dumps(group), "--batches", json.dumps(probe),
                                        "--frames", str(frames), "--before", json.dumps(before),
                                        "--eager-prefill", json.dumps(eager_prefill), *thread_args], "timing")
        if before:
            baseline = timing["before"]  # type: ignore[index]
        if eager_prefill:
            unfused = timing["eager_prefill"]  # type: ignore[index]
        if not isolated or not parts:
            parts = timing["parts"]  # type: ignore[index]
        by_point.update(zip(map(tuple, group), timing["records"]))  # type: ignore[index]
    records = [by_point[p] for p in points]
    for i, mode in enumerate(args.modes, start=2):
        print(f"[{i}/{steps}] peak memory of {mode}: each point in a process of its own", file=sys.stderr, flush=True)
        for j, point in enumerate(points):  # records come back in the order of points
            if point[0] == mode:
                peaks = _run_worker(replace(workload, actions="eager", prefill="eager"),
                                    ["--task", "memory", "--mode", mode, "--points", json.dumps([point[1:]]), *thread_args], mode)
                records[j]["peak_mem_bytes"] = peaks[0]  # type: ignore[index]
    add_comparisons(records, parts)  # type: ignore[arg-type]
    print(format_table(records, parts, header, baseline, unfused))  # type: ignore[arg-type]
    total = time.monotonic() - started
    machine["load_average_at_end"] = load_average()
    print(f"\n(total {total:.0f} s; load average at start {machine['load_average_at_start']}, at end "
          f"{machine['load_average_at_end']})")
    if args.out:
        meta = {"header": header, "machine": machine, "workload": asdict(workload), "total_s": total,
                "command": _command(argv if argv is not None else sys.argv[1:], args.out)}
        for path in write_outputs(args.out, records, parts, meta, baseline, unfused):  # type: ignore[arg-type]
            print(f"wrote {path.name}")
    return 0
