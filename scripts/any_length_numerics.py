"""How far `oxygen-sim eval --envs N --any-length` is from one by one, per episode.

    .venv/bin/python scripts/any_length_numerics.py --episodes 8 --seed 7401 --envs 8

Runs the same `oxygen-sim eval` episodes (the command line's own arguments after the flags above) one by one and
with every due chunk batched (``--any-length``), and prints per episode: the outcome each way, the max absolute
difference of the first chunk (the same observation both ways: float rounding alone) and of every chunk while both
episodes still see the same observations, the chunk at which their observations part (the arm moved by a
rounding's worth, and the closed loop amplifies it: the joint state is digitized into the prompt, a value on a bin
edge lands in the next bin) and the largest difference of any chunk after that. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import numpy as np

from oxygen_ros.runtime import PolicyRuntime
from oxygen_ros.sim import cli
from oxygen_ros.sim.cli_args import checked_args
from oxygen_ros.sim.cli_common import in_spec_order
from oxygen_ros.sim.evaluate import evaluate


def run(argv: list[str], any_length: bool) -> list:
    args = checked_args(["eval", *argv])
    config, settings = cli._config_from_args(args)
    settings = dataclasses.replace(cli.with_run_settings(settings, args), time_limit_s=args.time_limit or cli.DEFAULT_TIME_LIMIT_S,
                                   guarded=args.limits)  # fmt: skip
    specs = cli.varied_specs(args)
    runtime = PolicyRuntime.load(config)
    envs = args.envs if any_length else 1
    return in_spec_order(list(evaluate(runtime, specs, settings, envs, exact=not any_length)), specs)


def compare(alone, batched) -> dict:
    """Per episode: outcomes, first-chunk difference, the max difference while the inputs agree, where they part."""
    first = float(np.max(np.abs(alone.actions[0] - batched.actions[0])))
    same, parted = [], None
    for k, (a, b) in enumerate(zip(alone.actions, batched.actions)):
        d = float(np.max(np.abs(a - b)))
        if k > 0 and d > 100 * max(first, 1e-6):  # the observations differ from here: the loop took another path
            parted = k
            break
        same.append(d)
    every = max(float(np.max(np.abs(a - b))) for a, b in zip(alone.actions, batched.actions))
    return {"seed": alone.spec.seed, "success": [alone.success, batched.success], "chunks": [alone.chunks, batched.chunks],
            "first_chunk_max_abs": first, "max_abs_while_same": max(same), "parted_at_chunk": parted,
            "max_abs_common_chunks": every}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--envs", type=int, default=8)
    known, rest = p.parse_known_args()
    alone, batched = run(rest, False), run([*rest, "--envs", str(known.envs), "--any-length"], True)
    rows = [compare(a, b) for a, b in zip(alone, batched)]
    for r in rows:
        print(f"seed {r['seed']}: success {r['success'][0]} / {r['success'][1]}, chunks {r['chunks'][0]} / {r['chunks'][1]}; "
              f"first chunk max |diff| {r['first_chunk_max_abs']:.2e}, {r['max_abs_while_same']:.2e} while the inputs agree; "
              f"parted at chunk {r['parted_at_chunk']}, then up to {r['max_abs_common_chunks']:.3g}")  # fmt: skip
    summary = {"successes": [sum(r["success"][0] for r in rows), sum(r["success"][1] for r in rows)],
               "first_chunk_max_abs": max(r["first_chunk_max_abs"] for r in rows),
               "parted": sum(r["parted_at_chunk"] is not None for r in rows),
               "max_abs_common_chunks": max(r["max_abs_common_chunks"] for r in rows), "episodes": rows}  # fmt: skip
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
