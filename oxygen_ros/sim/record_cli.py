"""``oxygen-sim record``'s command line: a simulator driven by its scripted expert, written as a robot's bag.

    oxygen-sim record --env aloha_transfer_cube --episodes 2 --seed 12345 --bag expert.mcap
    oxygen-sim record --env aloha_transfer_cube --episodes 1 --seed 12345 --bag expert_png.mcap --images png
    oxygen-sim record --env tabletop --episodes 2 --seed 12345 --bag tabletop.mcap

The bag writers live above the simulator, in ``oxygen_ros.replay.expert_bags`` (they write with the bag tools'
``rosbags`` layer); ``oxygen-sim`` (``oxygen_ros.apps.oxygen_sim``) runs them. No rclpy.
"""

from __future__ import annotations

import argparse
from typing import Any


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
    rec.add_argument("--episodes", type=int, default=1, help="episodes recorded into the bag (default %(default)s)")
    rec.add_argument("--seed", type=int, default=0, help="first episode seed (episodes use seed .. seed+N-1; default %(default)s)")
    rec.add_argument("--bag", required=True, help="output bag: NAME.mcap / NAME.db3 or a folder (rosbag2)")
    rec.add_argument("--storage", choices=("mcap", "sqlite3"), help="storage of a folder bag (default mcap)")
    rec.add_argument("--image-size", type=_size, help="camera images WxH (default: what the shipped policy sees, "
                     "ALOHA 96x96, table-top 64x64)")  # fmt: skip
    rec.add_argument("--camera-every", type=int, default=1, metavar="STEPS", help="an image per camera every this many steps (default 1)")
    rec.add_argument("--images", choices=("raw", "png", "jpeg"), default="raw",
                     help="cameras as sensor_msgs/Image (raw, default) or sensor_msgs/CompressedImage (png, jpeg)")  # fmt: skip
    rec.add_argument("--whole-episodes", action="store_true",
                     help="ALOHA: every episode runs its 8 s, on past the hand-over (default: it ends at the hand-over)")  # fmt: skip
    rec.add_argument("--overwrite", action="store_true", help="replace an existing bag")
    rec.add_argument("--quiet", action="store_true")
