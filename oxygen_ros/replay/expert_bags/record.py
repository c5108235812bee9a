"""``oxygen-sim record``: the simulators' scripted experts written as robots' bags (parser:
``oxygen_ros.sim.record_cli``). The last line printed is one JSON object (the bag, its topics, the episodes and
whether the expert succeeded in each). Held-out seeds are below 1_000_000 (training uses the seeds above). No
rclpy.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tqdm import tqdm

from ..bagio import BagError


def record(args: argparse.Namespace) -> int:

    if args.episodes < 1 or args.camera_every < 1:
        print("oxygen-sim: --episodes and --camera-every must be >= 1", file=sys.stderr)
        return 2
    seeds = list(range(args.seed, args.seed + args.episodes))
    bar = tqdm(total=1, desc=f"record {args.env}", disable=args.quiet, file=sys.stderr, unit="step")

    def on_step(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh() if done % 50 == 0 else None

    try:
        summary = _record(args, seeds, on_step)
    except (BagError, ValueError) as exc:
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 2
    finally:
        bar.close()
    print(json.dumps({"env": args.env, "seed": args.seed, **summary}))
    return 0


def _record(args: argparse.Namespace, seeds: list[int], on_step: Any) -> dict[str, Any]:
    if args.env == "tabletop":
        from .tabletop import TabletopBagSpec, record_tabletop_bag

        spec = TabletopBagSpec(seeds, image_format=args.images, camera_every_steps=args.camera_every,
                               image_size=args.image_size)  # fmt: skip
        return record_tabletop_bag(args.bag, spec, storage=args.storage, overwrite=args.overwrite, on_step=on_step)
    from oxygen_ros.sim.aloha.cli import task_of
    from oxygen_ros.sim.aloha.expert import EXPERT_TASKS

    from .aloha import AlohaBagSpec, record_expert_bag

    task = task_of(args.env)
    if task not in EXPERT_TASKS:
        raise ValueError(f"no scripted expert for {args.env}; there is one for aloha_transfer_cube")
    spec = AlohaBagSpec(seeds, task, image_size=args.image_size or (96, 96), camera_every_steps=args.camera_every,
                        image_format=args.images, whole_episodes=args.whole_episodes)  # fmt: skip
    return record_expert_bag(args.bag, spec, storage=args.storage, overwrite=args.overwrite, on_step=on_step)
