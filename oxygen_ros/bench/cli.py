"""``oxygen-bench``: reproduce the OxyGen comparison side by side in one run.

Every mode runs on the same model (same seed, same weights), the same observations and the same noise,
each in its own worker process so that its peak memory is its own. Ratios are computed within the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from .report import add_comparisons, format_table, write_outputs
from .workload import Workload, bf16_supported

FULL_LENGTHS = (5, 10, 20, 30)
FULL_K = (1, 5)
QUICK_LENGTHS = (5, 30)
QUICK_K = (1,)


def _sweep(mode: str, lengths: tuple[int, ...], ks: tuple[int, ...]) -> list[tuple[int, int]]:
    if mode == "action_only":
        return [(0, 1)]
    if mode == "oxygen":
        return [(n, k) for n in lengths for k in ks]
    return [(n, n) for n in lengths]


def _run_worker(workload: Workload, mode: str, extra: list[str]) -> object:
    cmd = [sys.executable, "-m", "oxygen_ros.bench.worker", "--workload", json.dumps(asdict(workload)), "--mode", mode, *extra]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # progress streams through stderr
    if proc.returncode != 0:
        raise SystemExit(f"oxygen-bench: the {mode} worker failed (exit {proc.returncode}); see its output above")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="oxygen-bench",
        description="OxyGen vs sequential / parallel / shared-KV-only / action-only on one model, side by side.",
    )
    parser.add_argument("--quick", action="store_true", help="reduced sweep: N in {5, 30}, k = 1, fewer frames")
    parser.add_argument("--preset", default="bench", help="model preset (default: bench, shaped like pi0.5)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda[:N]")
    parser.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                        help="auto = bfloat16 where the hardware runs it natively, else float32")
    parser.add_argument("--lengths", type=int, nargs="+", help="decode lengths N (default 5 10 20 30)")
    parser.add_argument("--tokens-per-frame", type=int, nargs="+", dest="ks", help="oxygen's k values (default 1 5)")
    parser.add_argument("--modes", nargs="+", default=["action_only", "sequential", "parallel", "shared", "oxygen"])
    parser.add_argument("--frames", type=int, help="measured frames per point (default 8, quick 4)")
    parser.add_argument("--horizon", type=int, default=10)
    parser.add_argument("--denoise-steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per worker (default: torch's choice)")
    parser.add_argument("--out", type=Path, help="write results.json, parts.json and PNG plots here")
    args = parser.parse_args(argv)

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda requested but CUDA is not available")
    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if bf16_supported(args.device) else "float32")
    lengths = tuple(args.lengths or (QUICK_LENGTHS if args.quick else FULL_LENGTHS))
    ks = tuple(args.ks or (QUICK_K if args.quick else FULL_K))
    frames = args.frames or (4 if args.quick else 8)
    workload = Workload(args.preset, args.device, dtype, args.horizon, args.denoise_steps)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")

    header = (
        f"oxygen-bench: preset {args.preset}, {args.device}, {dtype}, H={args.horizon}, "
        f"{args.denoise_steps} denoising steps, N in {list(lengths)}, k in {list(ks)}, {frames} measured frames, "
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}"
    )
    print(header, file=sys.stderr, flush=True)
    started = time.monotonic()
    batches = sorted({1, 10, 30} | {max(1, -(-n // k)) for n in lengths for k in ks})
    thread_args = ["--threads", str(args.threads)] if args.threads else []
    print("[1/%d] measuring parts (P, A, D(B))" % (len(args.modes) + 1), file=sys.stderr, flush=True)
    parts = _run_worker(workload, "parts", ["--batches", json.dumps(batches), "--frames", str(frames), *thread_args])
    records: list[dict] = []
    for i, mode in enumerate(args.modes, start=2):
        print(f"[{i}/{len(args.modes) + 1}] mode {mode}", file=sys.stderr, flush=True)
        sweep = _sweep(mode, lengths, ks)
        records += _run_worker(workload, mode, ["--sweep", json.dumps(sweep), "--frames", str(frames), *thread_args])  # type: ignore[operator]
    add_comparisons(records, parts)  # type: ignore[arg-type]
    print(format_table(records, parts, header))  # type: ignore[arg-type]
    print(f"\n(total {time.monotonic() - started:.0f} s)")
    if args.out:
        meta = {"header": header, "dtype": dtype, "device": args.device, "preset": args.preset}
        for path in write_outputs(args.out, records, parts, meta):  # type: ignore[arg-type]
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
