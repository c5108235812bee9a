"""``scripts/demo.sh [--robot tabletop|aloha] ...``: picks the robot's demo and hands it the other options."""

from __future__ import annotations

import argparse
import sys

from oxygen_ros.demos.listener import ROBOTS


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chooser = argparse.ArgumentParser(add_help=False)
    chooser.add_argument("--robot", choices=ROBOTS, default="tabletop")
    chosen, rest = chooser.parse_known_args(argv)
    if chosen.robot == "aloha":
        from oxygen_ros.demos import aloha

        return aloha.main(rest)
    from oxygen_ros.demos import tabletop

    return tabletop.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
