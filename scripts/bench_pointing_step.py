"""Training-step time with and without the pointing loss, side by side in one run.

Both configurations train on the same 800 simulator samples (variations on, two torch threads); their
20-step runs alternate four times so the machine's drift hits both alike. Prints each run's seconds per step
and the medians' ratio. Usage: ``.venv/bin/python scripts/bench_pointing_step.py [--weight 0.1]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from functools import partial

import torch

from oxygen_ros.sim.dataset import expert_samples, vocabulary
from oxygen_ros.sim.expert import object_names
from oxygen_ros.train.trainer import TrainConfig, _optimize, patch_heads, prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weight", type=float, default=0.1, help="pointing weight of the second configuration")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    if args.weight <= 0:
        parser.error("--weight must be > 0 (the first configuration is the loss off)")
    torch.set_num_threads(2)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for weight in (0.0, args.weight):
            cfg = TrainConfig(samples=800, steps=args.steps, warmup_steps=5, data_workers=1, pointing_weight=weight,
                              object_names=tuple(object_names()))  # fmt: skip
            runtime, data, _ = prepare(cfg, partial(expert_samples, variations=True), f"{tmp}/{weight}", vocabulary(True))
            runs[weight] = (cfg, runtime.model, data, patch_heads(cfg, runtime.model.config))
        seconds: dict[float, list[float]] = {w: [] for w in runs}
        for repeat in range(args.repeats):
            for weight, (cfg, model, data, heads) in runs.items():
                history: dict[str, list[float]] = {"total": [], "flow": [], "text": [], "lr": []}
                start = time.perf_counter()
                _optimize(model, data, cfg, cfg, torch.Generator().manual_seed(repeat), history, "", False, None, heads)
                seconds[weight].append((time.perf_counter() - start) / cfg.steps)
    for weight, values in seconds.items():
        print(f"pointing weight {weight}: " + ", ".join(f"{v:.3f}" for v in values) + f" s/step, median {statistics.median(values):.3f}")
    base, other = (statistics.median(seconds[w]) for w in runs)
    print(f"ratio of the medians: {other / base:.3f}")


if __name__ == "__main__":
    main()
