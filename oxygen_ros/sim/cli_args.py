"""``oxygen-sim``'s command line: its parser and checks, with no import of torch or the simulator's loops, so
that ``--help`` and a refused command line answer at once (``oxygen_ros.sim.cli`` runs the commands)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from oxygen_ros.cluster.args import add_ray_args, ray_refusal
from oxygen_ros.engine.mode_names import MODES
from oxygen_ros.runtime.alignment import REPLAN

from .cli_common import DEFAULT_PARAMS, ROOT
from .episode import DEFAULT_TIME_LIMIT_S, EVAL_FAMILIES, SCENE_FAMILIES
from .phrasing import FAMILIES, SPLITS
from .scene import MAX_OBJECTS
from .variation import DISTRACTORS

DESCRIPTION = "closed-loop evaluation of a policy in the simulator, without DDS"


def _add_execution_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--replan", choices=list(REPLAN),
                        help="a new chunk every tick, or once n_action_steps steps ran (default: the file's)")
    parser.add_argument("--n-action-steps", type=int,
                        help="actions of a chunk executed before the next replaces it (default: the file's)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oxygen-sim", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="closed-loop evaluation of the policy (simulated time, no DDS)")
    ev.add_argument("--episodes", type=int, default=20, help="episodes per family (default %(default)s)")
    ev.add_argument("--seed", type=int, default=0, help="first held-out episode seed (episodes use seed .. seed+N-1; default %(default)s)")
    ev.add_argument("--engine-mode", choices=MODES,
                    help="the engine's scheduling (default: the file's engine_mode)")
    ev.add_argument("--params-file", type=Path, default=DEFAULT_PARAMS, help="the node's parameters YAML (default %(default)s)")
    ev.add_argument("--tokens-per-frame", type=int, help=f"decode steps per tick (default: the file's, or 4 if it says 0)")
    ev.add_argument("--latency", type=float, default=0.0, help="observation→trajectory latency in seconds (default %(default)s)")
    ev.add_argument("--time-alignment", choices=["stamp", "drop", "none"],
                    help="how chunks are timed (default: the file's time_alignment, else stamp)")
    ev.add_argument("--rtc", action=argparse.BooleanOptionalAction, help="real-time chunking (default: the file's rtc)")
    ev.add_argument("--blank-cameras", action="store_true", help="black camera images (does the policy use vision?)")
    ev.add_argument("--no-limits", action="store_true",
                    help="--env aloha_*: without the params file's limits and resume blend (docs/safety.md)")
    ev.add_argument("--limits", action="store_true",
                    help="table-top: the arm's trajectories through the node's guard, with its joint speeds and ranges")
    ev.add_argument("--time-limit", type=float, help=f"seconds per episode (default {DEFAULT_TIME_LIMIT_S:g}; --env aloha_*: 400 steps, 8 s)")
    ev.add_argument("--instruction", help="use this instruction in every episode (any text)")
    ev.add_argument("--family", nargs="+", choices=[*EVAL_FAMILIES, "all"], metavar="FAMILY",
                    help="run the seeds' episodes once per family: instruction phrasings (" + ", ".join(FAMILIES)
                    + ") or scene variations (" + ", ".join(SCENE_FAMILIES) + "); 'all' for every one (default: plain)")
    ev.add_argument("--split", choices=list(SPLITS), default="held_out",
                    help="words of the phrasing families and questions: the training data's or held-out ones (default %(default)s)")
    ev.add_argument("--template-file", help="instruction templates, one a line, '{}' where the object's name goes")
    ev.add_argument("--brightness", type=float, nargs="+", metavar="F", help="image gain, both cameras or base and wrist")
    ev.add_argument("--contrast", type=float, nargs="+", metavar="F", help="contrast around the image mean, both or base and wrist")
    ev.add_argument("--distractor", choices=list(DISTRACTORS), help="one more object: the named one's colour or its kind")
    ev.add_argument("--num-objects", type=int, help=f"objects per scene (1-{MAX_OBJECTS}; default: drawn by the seed)")
    ev.add_argument("--questions", type=int, default=0, help="questions asked per episode through the ask path (answer_accuracy; default %(default)s)")
    ev.add_argument("--num-threads", type=int, help="torch CPU threads")
    ev.add_argument("--device", help="run the model here instead of the file's device (e.g. cpu for a file that says cuda)")
    ev.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="the model's dtype instead of the file's")
    _add_execution_args(ev)
    ev.add_argument("--envs", type=int, default=1,
                    help="episodes run at once through one engine (their chunks batched); default 1: one by one")
    ev.add_argument("--any-length", action="store_true",
                    help="--envs: batch every due chunk in one call (faster). Changes the numerics: a chunk differs "
                    "from one by one by float rounding (at most 2.4e-7 on the same observation), which the closed loop "
                    "grows into other episodes (chunks up to 0.19 apart, other lengths, an outcome may differ; "
                    "docs/simulator.md, scripts/any_length_numerics.py)")
    _add_ray_args(ev)
    ev.add_argument("--json-out", help="write the summary and every episode's details here")
    ev.add_argument("--quiet", action="store_true")
    _add_aloha_args(ev, "default params file config/aloha_demo.yaml; the scene-variation flags are the table-top's")
    ev.add_argument("--expert-as-model", action="store_true",
                    help="--env aloha_*: the scripted expert's chunks as the network's output (a small random checkpoint "
                    "in place of the file's; its texts are random): checks the loop, the adapter and the conversions")
    ev.add_argument("--through-node", action="store_true",
                    help="--env aloha_*: run oxygen_node and the simulator node over DDS in lockstep instead")
    ev.add_argument("--image-width", type=int, help="--through-node: camera image width (default: the file's camera_widths, "
                    "else the model's image size, as the loop without DDS renders)")
    ev.add_argument("--image-height", type=int, help="--through-node: camera image height (default: the file's camera_heights, "
                    "else the model's image size)")
    ev.add_argument("--fast-render", action=argparse.BooleanOptionalAction, default=True,
                    help="--through-node: no shadows, no anti-aliasing (default, about 10x cheaper, as the training data and "
                    "the loop without DDS render; --no-fast-render for the full-quality look)")
    ch = sub.add_parser("chunking", help="naive vs time-aligned vs time-aligned + RTC at several latencies")
    ch.add_argument("--episodes", type=int, default=20, help="episodes per variant and latency (default %(default)s)")
    ch.add_argument("--seed", type=int, default=0, help="first held-out episode seed (default %(default)s)")
    ch.add_argument("--params-file", type=Path, default=DEFAULT_PARAMS, help="the node's parameters YAML (default %(default)s)")
    ch.add_argument("--latencies", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3], help="seconds (default %(default)s)")
    ch.add_argument("--variants", nargs="+", choices=["naive", "aligned", "aligned+rtc"],
                    help="default: all three")
    ch.add_argument("--time-limit", type=float, default=12.0, help="seconds per episode (default %(default)s)")
    ch.add_argument("--engine-mode", choices=MODES,
                    help="default: the file's (action_only gives the same actions without the text work)")
    ch.add_argument("--num-threads", type=int, help="torch CPU threads")
    _add_execution_args(ch)
    ch.add_argument("--out", type=Path, default=ROOT / "docs" / "rtc", help="results.json, table.md, chunking.png")
    ch.add_argument("--combine", type=Path, nargs="+", metavar="FOLDER",
                    help="no new runs: one table and plot from earlier --out folders (e.g. one variant per process)")
    ch.add_argument("--quiet", action="store_true")
    ex = sub.add_parser("expert", help="the scripted expert's success rate on held-out seeds")
    ex.add_argument("--episodes", type=int, default=50, help="episodes (default %(default)s)")
    ex.add_argument("--seed", type=int, default=0, help="first held-out episode seed (default %(default)s)")
    ex.add_argument("--quiet", action="store_true")
    _add_aloha_args(ex, "the scripted expert replays ACT's transfer-cube waypoints")
    ex.add_argument("--through-outputs", metavar="PARAMS_FILE",
                    help="--env aloha_*: the expert's actions as model outputs through this robot config's conversions "
                    "and controllers over DDS into the MuJoCo arm")
    ex.add_argument("--image-size", type=int, default=64, help="--through-outputs: camera image size (the expert ignores them; default %(default)s)")
    ex.add_argument("--fast-render", action=argparse.BooleanOptionalAction, default=True,
                    help="--through-outputs: no shadows, no anti-aliasing (default; --no-fast-render for the GIF's look)")
    from .record_cli import add_record_parser

    add_record_parser(sub)
    return parser


def _add_ray_args(parser: argparse.ArgumentParser) -> None:
    add_ray_args(parser, "table-top: run the episodes as Ray tasks, per-episode records equal to one machine's")
    parser.add_argument("--ray-shards", type=int, help="--ray: tasks the episodes are split into, each loading one "
                        "engine (default: the cluster's CPUs / --ray-cpus, at most one per episode)")


def _ray_refusal(args: argparse.Namespace) -> str | None:
    """Why the command line's Ray options cannot run (None: they can, or there are none)."""
    if refusal := ray_refusal(args, args.ray_shards is not None, "--ray-shards"):
        return refusal
    if args.ray is None:
        return None
    if args.env != "tabletop" or args.through_node:
        return "--ray runs the table-top evaluation (--env tabletop); the ALOHA evaluation runs on one machine"
    if args.ray_shards is not None and args.ray_shards < 1:
        return "--ray-shards >= 1"
    return None


def _add_aloha_args(parser: argparse.ArgumentParser, note: str) -> None:
    from .aloha.cli import ENVS

    parser.add_argument("--env", choices=["tabletop", *ENVS], default="tabletop",
                        help=f"the simulator: the table-top arm (default) or the MuJoCo ALOHA (gym-aloha scenes; {note})")
    parser.add_argument("--timeout", type=float, default=7200.0, help="--env aloha_*: wall-time limit of the run in seconds (default %(default)s)")
    parser.add_argument("--gif", help="--env aloha_*: a GIF of the first episode (every 5th step): the three cameras with "
                        "the streamed texts (--through-node: cam_high alone, 320x240)")


def checked_args(argv: list[str] | None = None) -> argparse.Namespace | int:
    """The command line parsed and checked; an exit status (message on stderr) where it is refused."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    if args.command == "eval" and args.envs < 1:
        print("oxygen-sim: --envs must be >= 1", file=sys.stderr)
        return 2
    if args.command in ("eval", "chunking") and args.episodes < 1:
        print("oxygen-sim: --episodes must be >= 1", file=sys.stderr)
        return 2
    if args.command == "eval" and sum(x is not None for x in (args.instruction, args.template_file, args.family)) > 1:
        print("oxygen-sim: choose one of --instruction, --template-file and --family", file=sys.stderr)
        return 2
    if args.command == "eval" and args.questions < 0:
        print("oxygen-sim: --questions must be >= 0", file=sys.stderr)
        return 2
    if args.command == "eval" and (refusal := _ray_refusal(args)):
        print(f"oxygen-sim: {refusal}", file=sys.stderr)
        return 2
    return args
