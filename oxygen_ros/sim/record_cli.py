"""``oxygen-sim record``: a simulator driven by its scripted expert, written as a robot's bag (no rclpy).

    oxygen-sim record --env aloha_transfer_cube --episodes 2 --seed 12345 --bag expert.mcap
    oxygen-sim record --env aloha_transfer_cube --episodes 1 --seed 12345 --bag expert_png.mcap --images png
    oxygen-sim record --env tabletop --episodes 2 --seed 12345 --bag tabletop.mcap

The bag holds what a team records after teleoperating: the cameras, the joint states and the commands the
expert sent to the controllers, at the robot's topics and units (``oxygen_ros.sim.aloha.expert_bag``,
``oxygen_ros.sim.tabletop_bag``). The last line printed is one JSON object (the bag, its topics, the episodes
and whether the expert succeeded in each). Held-out seeds are below 1_000_000 (training uses the seeds above).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tqdm import tqdm


def _size(text: str) -> tuple[int, int]:
    try:
        w, _, h = text.lower().partition("x")
        return int(w), int(h or w)
    except ValueError:
        raise argparse.ArgumentTypeError(f"image size must be WIDTHxHEIGHT (e.g. 96x96) or one number, got {text!r}") from None


def add_record_parser(sub: Any) -> None:
    from .aloha.cli import ENVS

    rec = sub.add_parser("record", help="the scripted expert's episodes as a robot's bag (cameras, joint states, commands)")
    rec.add_argument("--env", choices=["tabletop", *ENVS], default="aloha_transfer_cube",
                     help="the simulator (default aloha_transfer_cube; aloha_insertion has no expert)")  # fmt: skip
    rec.add_argument("--episodes", type=int, default=1)
    rec.add_argument("--seed", type=int, default=0, help="first episode seed (episodes use seed .. seed+N-1)")
    rec.add_argument("--bag", required=True, help="output bag: NAME.mcap / NAME.db3 or a folder (rosbag2)")
    rec.add_argument("--storage", choices=("mcap", "sqlite3"), help="storage of a folder bag (default mcap)")
    rec.add_argument("--image-size", type=_size, help="camera images WxH (default: what the shipped policy sees, "
                     "ALOHA 96x96, table-top the params file's)")  # fmt: skip
    rec.add_argument("--camera-every", type=int, default=1, metavar="STEPS", help="an image per camera every this many steps (default 1)")
    rec.add_argument("--images", choices=("raw", "png", "jpeg"), default="raw",
                     help="cameras as sensor_msgs/Image (raw, default) or sensor_msgs/CompressedImage (png, jpeg)")  # fmt: skip
    rec.add_argument("--overwrite", action="store_true", help="replace an existing bag")
    rec.add_argument("--quiet", action="store_true")


def record(args: argparse.Namespace) -> int:
    if args.episodes < 1 or args.camera_every < 1:
        print("oxygen-sim: --episodes and --camera-every must be >= 1", file=sys.stderr)
        return 2
    from oxygen_ros.replay.bagio import BagError

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
        from .tabletop_bag import TabletopBagSpec, record_tabletop_bag

        spec = TabletopBagSpec(seeds, image_format=args.images, camera_every_steps=args.camera_every,
                               image_size=args.image_size)  # fmt: skip
        return record_tabletop_bag(args.bag, spec, storage=args.storage, overwrite=args.overwrite, on_step=on_step)
    from .aloha.cli import task_of
    from .aloha.expert import EXPERT_TASKS
    from .aloha.expert_bag import AlohaBagSpec, record_expert_bag

    task = task_of(args.env)
    if task not in EXPERT_TASKS:
        raise ValueError(f"no scripted expert for {args.env}; there is one for aloha_transfer_cube")
    spec = AlohaBagSpec(seeds, task, image_size=args.image_size or (96, 96), camera_every_steps=args.camera_every,
                        image_format=args.images)  # fmt: skip
    return record_expert_bag(args.bag, spec, storage=args.storage, overwrite=args.overwrite, on_step=on_step)
