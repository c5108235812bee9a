"""``oxygen-bench``: reproduce the OxyGen comparison side by side in one run (``oxygen_ros.bench.sweep``).

The command line is read here, before torch loads, so that ``--help`` and a refused line answer at once.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from oxygen_ros.engine.mode_names import MODES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oxygen-bench",
        description="OxyGen vs sequential / parallel / shared-KV-only / action-only on one model, side by side.",
    )
    parser.add_argument("--quick", action="store_true", help="reduced sweep: N in {5, 30}, k = 1, fewer frames; with --robots one 2 s round and 3 rounds of the parts")
    parser.add_argument("--preset", default="bench", help="model preset (default: bench, shaped like pi0.5)")
    parser.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda where torch sees one, else cpu)")
    parser.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                        help="auto = bfloat16 where the hardware runs it natively, else float32")
    parser.add_argument("--lengths", type=int, nargs="+", help="decode lengths N (default 5 10 20 30)")
    parser.add_argument("--tokens-per-frame", type=int, nargs="+", dest="ks", help="oxygen's k values (default 1 5)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), metavar="MODE",
                        help=f"the modes compared, of {', '.join(MODES)} (default: all)")
    parser.add_argument("--frames", type=int, help="measured frames per point (default 12, quick 6; --robots: at most per run, default 1000, quick 3)")
    parser.add_argument("--horizon", type=int, default=10, help="actions per chunk H (default %(default)s)")
    parser.add_argument("--denoise-steps", type=int, default=10, help="flow-matching denoising steps per chunk (default %(default)s)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per worker (default: torch's choice)")
    parser.add_argument("--actions", choices=("auto", "compiled", "cuda_graph", "eager"), default="auto",
                        help="the action chunk: compiled with torch.compile (eager fallback), replayed from a CUDA "
                        "graph, or the eager network; auto = cuda_graph on CUDA (with decode steps from CUDA graphs "
                        "too), compiled on CPU")
    parser.add_argument("--prefill", choices=("auto", "compiled", "eager"), default="auto",
                        help="the prefill: compiled with torch.compile (eager fallback) or the eager network; auto = compiled")
    parser.add_argument("--no-lanes", dest="lanes", action="store_false",
                        help="run everything on the calling thread (no decode step overlapped with the action chunk)")
    parser.add_argument("--before", action="store_true",
                        help="also time action_only and oxygen (largest N) on a plain engine (eager action chunk "
                        "and prefill, no lanes), interleaved in the same rounds: the before/after comparison of one run")
    parser.add_argument("--eager-prefill", action="store_true",
                        help="also time action_only and oxygen (largest N) with the eager prefill, all else as this "
                        "run's engine, interleaved in the same rounds")
    parser.add_argument("--kv-budget-mb", type=int, default=96,
                        help="KV pool of each engine (default 96; a full pi05 at N = 30 needs about 1024)")
    parser.add_argument("--startup", action="store_true",
                        help="instead: seconds from process start to the first chunk, cold (empty inductor cache) and "
                        "warm (a second start on the cache the first wrote), each in a fresh process")
    parser.add_argument("--compare-caches", action="store_true",
                        help="with --startup: also cold and warm with the ahead-of-time artefacts off (inductor's "
                        "caches alone) and a warm start from torch's MegaCache bundle (3 more processes)")
    parser.add_argument("--out", type=Path, help="write results.json, table.txt and PNG plots here")
    _add_fleet_arguments(parser)
    return parser


def _add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robots", help="fleet comparison: robot counts, e.g. 1,2,4,8 (one engine vs N processes)")
    parser.add_argument("--decode-len", type=int, default=10, help="--robots: tokens of each robot's text per frame (default %(default)s)")
    parser.add_argument("--seconds", type=float, help="--robots: measured wall time per run (default 20, quick 2)")
    parser.add_argument("--repeats", type=int, help="--robots: rounds (medians reported; default 3, quick 1)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .sweep import run  # torch and the workers: after the command line is read

    return run(parser, args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
