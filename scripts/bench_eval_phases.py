"""Where ``oxygen-replay eval``'s time goes: imports, the bag's checks, the model's load, the replay and judging.

Each run is a fresh process (imports are part of a command's start). Per phase it prints wall and CPU seconds
(CPU: this process's user + system time, which a machine loaded by other work inflates less than wall time),
and whether ``torch._dynamo`` was imported (eval never compiles; importing it costs seconds).

    .venv/bin/python scripts/bench_eval_phases.py expert.mcap --params-file config/aloha_demo.yaml --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _phase(marks: list, name: str) -> None:
    marks.append((name, time.perf_counter(), time.process_time()))


def one_run(bag: str, params: str) -> dict:
    marks: list = []
    _phase(marks, "start")
    import torch  # noqa: F401 - timed on its own

    _phase(marks, "import torch")
    from oxygen_ros.replay.config import load_replay_config
    from oxygen_ros.replay.evaluate import EvalOptions, EvalReplay

    _phase(marks, "import the rest")
    replay = EvalReplay(bag, load_replay_config(params), EvalOptions(seed=0))
    replay.check_bag()
    _phase(marks, "bag checks")
    runtime = replay.load_runtime()
    _phase(marks, "model load")
    summary = replay.evaluate(runtime)
    _phase(marks, "replay and judge")
    phases = {name: {"wall_s": round(w - marks[i][1], 3), "cpu_s": round(c - marks[i][2], 3)}
              for i, (name, w, c) in enumerate(marks[1:])}  # fmt: skip
    return {"phases": phases, "bag_s": summary["bag_duration_s"], "chunks": summary["chunks"],
            "dynamo_imported": "torch._dynamo" in sys.modules}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bag")
    parser.add_argument("--params-file", default="config/aloha_demo.yaml")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child run: JSON on stdout
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.bag, args.params_file)))
        return
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for k in range(args.runs):
        out = subprocess.run([sys.executable, __file__, args.bag, "--params-file", args.params_file, "--one"],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        run = json.loads(out.strip().splitlines()[-1])
        cells = ", ".join(f"{n} {p['wall_s']:.2f} s ({p['cpu_s']:.2f} CPU)" for n, p in run["phases"].items())
        total = sum(p["wall_s"] for p in run["phases"].values())
        cpu = sum(p["cpu_s"] for p in run["phases"].values())
        print(f"run {k + 1}: {cells}; total {total:.2f} s ({cpu:.2f} CPU) for {run['bag_s']:.1f} s of bag, "
              f"{run['chunks']} chunks, torch._dynamo imported: {run['dynamo_imported']}")


if __name__ == "__main__":
    main()
