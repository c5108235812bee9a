"""The ``--ray``, ``--ray-cpus`` and ``--ray-gpus`` options the evaluations share, and their checks (no Ray
import: a command line is checked before anything loads, on a machine without the extra too)."""

from __future__ import annotations

import argparse
import importlib.util

LOCAL = "local"  # --ray without an address: a cluster of this machine, started for the run


def add_ray_args(parser: argparse.ArgumentParser, what: str) -> None:
    """``--ray [ADDRESS]`` (``what``: what runs as the tasks) and the resources each task asks for."""
    parser.add_argument("--ray", nargs="?", const=LOCAL, metavar="ADDRESS",
                        help=f"{what} (pip install .[ray]): on the cluster at ADDRESS (host:port, or auto: the one this "
                        "machine is part of), or, without ADDRESS, on a cluster of this machine started for the run "
                        "(docs/scale.md)")  # fmt: skip
    parser.add_argument("--ray-cpus", type=float, default=1.0, help="--ray: CPUs per task (default %(default)s)")
    parser.add_argument("--ray-gpus", type=float, default=0.0, help="--ray: GPUs per task (default %(default)s)")


def ray_refusal(args: argparse.Namespace, others_set: bool = False, others: str = "") -> str | None:
    """Why the Ray options of ``args`` cannot run (None: they can, or there are none); ``others_set``: a
    command's own Ray options (named by ``others``) were given."""
    names = f"--ray-cpus, --ray-gpus and {others}" if others else "--ray-cpus and --ray-gpus"
    if args.ray is None:
        if others_set or args.ray_cpus != 1.0 or args.ray_gpus != 0.0:
            return f"{names} go with --ray"
        return None
    if args.ray_cpus <= 0 or args.ray_gpus < 0:
        return "--ray-cpus must be > 0, --ray-gpus >= 0"
    if importlib.util.find_spec("ray") is None:
        return "--ray needs Ray, an optional extra: pip install .[ray] (scripts/setup.sh installs it)"
    return None
