"""`oxygen-sim`: closed-loop evaluation of a policy in the simulator, without DDS.

    oxygen-sim eval --episodes 20 --seed 0                       # config/demo_policy.yaml: the trained demo policy
    oxygen-sim eval --episodes 20 --seed 0 --engine-mode sequential
    oxygen-sim eval --params-file my.yaml --latency 0.1 --time-alignment none --json-out episodes.json
    oxygen-sim eval --episodes 20 --replan tick                  # a new chunk every tick instead of the file's
    oxygen-sim eval --episodes 50 --seed 10000 --family all --questions 2   # success per family, answer_accuracy
    oxygen-sim eval --brightness 1.0 1.2 --contrast 0.8 --distractor same_colour --template-file my_templates.txt
    oxygen-sim chunking --episodes 20 --out docs/rtc                 # naive / aligned / aligned+RTC at 0-300 ms
    oxygen-sim expert --episodes 50 --seed 0                     # the scripted expert's own success rate
    oxygen-sim expert --env aloha_transfer_cube --episodes 50 --seed 0 [--through-outputs config/robots/aloha.yaml]
    oxygen-sim eval --env aloha_transfer_cube --episodes 20 --seed 0 --questions 2   # config/aloha_demo.yaml, no DDS
    oxygen-sim eval --env aloha_transfer_cube --params-file my_aloha.yaml --through-node --gif out/aloha/episode.gif
    oxygen-sim record --env aloha_transfer_cube --episodes 2 --seed 12345 --bag expert.mcap   # a teleoperation-like bag

The last line printed is one JSON object (success_rate, mean_time_to_success_s, narration_accuracy,
memory_accuracy, answer_accuracy, success_by_family, chunks, episodes, ...). Held-out evaluation seeds are in [0, 1_000_000); training uses
the seeds above.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from tqdm import tqdm

from oxygen_ros.runtime import RuntimeConfig, RuntimeLoadError
from oxygen_ros.runtime.alignment import REPLAN
from oxygen_ros.runtime.params_file import ParamsFileError, read_params_file
from oxygen_ros.runtime.paths import with_resolved_paths
from oxygen_ros.runtime.trajectory import JointLimits

from .dataset import expert_episode
from .episode import DEFAULT_TIME_LIMIT_S, EVAL_FAMILIES, SCENE_FAMILIES, EpisodeSpec
from .phrasing import FAMILIES, SPLITS
from .scene import MAX_OBJECTS, Scene
from .variation import DISTRACTORS, Lighting
from .cli_common import DEFAULT_PARAMS, ROOT, collect, in_spec_order, shown, with_overrides, with_run_settings
from .evaluate import EvalSettings, deterministic_config, eval_specs, evaluate, summarize

def load_params(params_file: Path) -> tuple[RuntimeConfig, EvalSettings]:
    """The runtime configuration and the robot wiring (joints, limits, timing) of a node parameters file."""
    values, _ = read_params_file(params_file, node="oxygen_node")
    values = with_resolved_paths(values, params_file.resolve().parent.parent)  # also next to the file's config/
    config = RuntimeConfig.from_dict(values, ignore_unknown=True)
    settings = EvalSettings()
    if values.get("joint_names"):
        lower, upper = values.get("joint_limits_lower") or [], values.get("joint_limits_upper") or []
        settings = dataclasses.replace(settings, joint_names=tuple(values["joint_names"]),
                                       limits=JointLimits(tuple(lower), tuple(upper)))  # fmt: skip
    if values.get("control_rate_hz"):
        settings = dataclasses.replace(settings, control_period_s=1.0 / float(values["control_rate_hz"]))
    if values.get("action_step_period_s"):
        settings = dataclasses.replace(settings, step_period_s=float(values["action_step_period_s"]))
    return config, settings


def _config_from_args(args: argparse.Namespace) -> tuple[RuntimeConfig, EvalSettings]:
    """The parameters file's configuration with the command line's overrides (ValueError on a bad value)."""
    config, settings = load_params(args.params_file)
    config = deterministic_config(config, getattr(args, "tokens_per_frame", None), args.engine_mode)
    return with_overrides(config, args), settings


def _pair(values: list[float] | None, flag: str) -> tuple[float, float] | None:
    """One value for both cameras or one per camera (base, wrist)."""
    if values is None:
        return None
    if len(values) not in (1, 2) or any(v <= 0 for v in values):
        raise ValueError(f"{flag} takes one or two positive factors (base, wrist), got {values}")
    return (values[0], values[-1])


def varied_specs(args: argparse.Namespace) -> list[EpisodeSpec]:
    """The episodes of the command line: per family (or instruction, or template file) the seeds' episodes,
    then the lighting, distractor and object count it sets for all of them (ValueError on a bad value)."""
    seeds = [s.seed for s in eval_specs(args.seed, args.episodes)]
    n = args.num_objects
    if n is not None:
        Scene.random(0, n)  # refuses counts the generator cannot place
    if args.instruction is not None:
        specs = [EpisodeSpec.with_instruction(s, args.instruction, n) for s in seeds]
    elif args.template_file:
        lines = [t.strip("\n") for t in Path(args.template_file).read_text().splitlines() if t.strip()]
        bad = [t for t in lines if "{}" not in t]
        if not lines or bad:
            raise ValueError(f"{args.template_file}: every line needs '{{}}' where the object's name goes ({bad[:1] or 'empty file'})")
        specs = [EpisodeSpec.with_template(s, lines[i % len(lines)], n) for i, s in enumerate(seeds)]
    else:
        families = list(EVAL_FAMILIES) if args.family == ["all"] else (args.family or ["plain"])
        specs = [EpisodeSpec.for_family(s, f, args.split, n) for f in families for s in seeds]
    brightness, contrast = _pair(args.brightness, "--brightness"), _pair(args.contrast, "--contrast")
    if brightness or contrast:
        specs = [dataclasses.replace(s, lighting=Lighting(brightness or s.lighting.brightness, contrast or s.lighting.contrast))
                 for s in specs]  # fmt: skip
    if args.distractor:
        specs = [dataclasses.replace(s, distractor=args.distractor) for s in specs]
    return specs


def _eval(args: argparse.Namespace) -> int:
    from oxygen_ros.runtime import PolicyRuntime

    try:
        config, settings = _config_from_args(args)
    except (ParamsFileError, ValueError, TypeError) as exc:
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 2
    settings = dataclasses.replace(with_run_settings(settings, args), time_limit_s=args.time_limit or DEFAULT_TIME_LIMIT_S,
                                   guarded=args.limits)  # fmt: skip
    try:
        specs = varied_specs(args)
    except (OSError, ValueError) as exc:
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 2
    try:
        runtime = PolicyRuntime.load(config)
    except RuntimeLoadError as exc:
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    try:
        results = collect(evaluate(runtime, specs, settings, args.envs, exact=not args.any_length), len(specs),
                          f"eval {config.engine_mode}", args.quiet)  # fmt: skip
    except ValueError as exc:  # e.g. --envs with a mode that serves one robot only
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 2
    wall_s = time.perf_counter() - started
    results = in_spec_order(results, specs)
    summary = summarize(results, runtime, settings)
    summary["seed"] = args.seed
    summary["envs"] = args.envs
    summary["wall_s"] = round(wall_s, 2)
    summary["action_batches"] = "any length" if args.any_length else "exact"
    if args.json_out:
        episodes = [{
            "seed": r.spec.seed, "family": r.spec.family, "instruction": r.spec.instruction, "target": r.spec.target_name,
            "place": r.place, "absent": r.absent, "distractor": r.spec.distractor, "lighting": vars(r.spec.lighting),
            "success": r.success,
            "time_to_success_s": r.time_to_success_s, "failure": r.failure, "chunks": r.chunks, "jerk_rms_rad_s3": r.jerk_rms,
            "switch_jumps": r.switch_jumps, "texts": [vars(t) for t in r.texts],
        } for r in results]  # fmt: skip
        Path(args.json_out).write_text(json.dumps({"summary": summary, "episodes": episodes}, indent=1))
    print(json.dumps(summary))
    return 0


def _expert(args: argparse.Namespace) -> int:
    specs = eval_specs(args.seed, args.episodes)
    times = [expert_episode(spec).success_time_s for spec in tqdm(specs, desc="expert", disable=args.quiet, file=sys.stderr)]
    ok = [t for t in times if t is not None]
    print(json.dumps({"success_rate": len(ok) / len(times), "mean_time_to_success_s": sum(ok) / len(ok) if ok else None,
                      "episodes": len(times)}))
    return 0


def _chunking(args: argparse.Namespace) -> int:
    from .chunking_study import VARIANTS, combine, run_study, write_outputs

    if args.combine:
        try:
            rows, meta = combine(args.combine)
        except (OSError, ValueError, KeyError) as exc:
            print(f"oxygen-sim: {exc}", file=sys.stderr)
            return 2
        write_outputs(rows, args.out, meta)
        print(json.dumps({"out": str(args.out), "rows": rows}))
        return 0
    try:
        config, settings = _config_from_args(args)
    except (ParamsFileError, ValueError, TypeError) as exc:
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 2
    settings = dataclasses.replace(settings, time_limit_s=args.time_limit)
    try:
        specs = eval_specs(args.seed, args.episodes)
    except ValueError as exc:
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 2
    variants = [v for v in VARIANTS if not args.variants or v.name in args.variants]
    say = (lambda _: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        rows = run_study(config, settings, specs, args.latencies, variants, progress=say)
    except RuntimeLoadError as exc:
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 1
    meta = {"episodes": args.episodes, "seed": args.seed,
            "model": shown(config.checkpoint) if config.checkpoint else f"preset {config.model_preset}",
            "params_file": shown(args.params_file), "time_limit_s": args.time_limit,
            "control_period_s": settings.control_period_s, "step_period_s": settings.action_period_s,
            "engine_mode": config.engine_mode, "rtc_beta": config.rtc_beta, "rtc_schedule": config.rtc_schedule,
            "rtc_prefix_attention_horizon": config.rtc_prefix_attention_horizon, "n_action_steps": config.n_action_steps,
            "replan": config.replan}  # fmt: skip
    write_outputs(rows, args.out, meta)
    print(json.dumps({"out": str(args.out), "rows": rows}))
    return 0


def _add_execution_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--replan", choices=list(REPLAN),
                        help="a new chunk every tick, or once n_action_steps steps ran (default: the file's)")
    parser.add_argument("--n-action-steps", type=int,
                        help="actions of a chunk executed before the next replaces it (default: the file's)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oxygen-sim", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="closed-loop evaluation of the policy (simulated time, no DDS)")
    ev.add_argument("--episodes", type=int, default=20)
    ev.add_argument("--seed", type=int, default=0, help="first held-out episode seed (episodes use seed .. seed+N-1)")
    ev.add_argument("--engine-mode", choices=["oxygen", "sequential", "shared", "parallel", "action_only"])
    ev.add_argument("--params-file", type=Path, default=DEFAULT_PARAMS, help="the node's parameters YAML")
    ev.add_argument("--tokens-per-frame", type=int, help=f"decode steps per tick (default: the file's, or 4 if it says 0)")
    ev.add_argument("--latency", type=float, default=0.0, help="observation→trajectory latency in seconds")
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
    ev.add_argument("--questions", type=int, default=0, help="questions asked per episode through the ask path (answer_accuracy)")
    ev.add_argument("--num-threads", type=int, help="torch CPU threads")
    ev.add_argument("--device", help="run the model here instead of the file's device (e.g. cpu for a file that says cuda)")
    ev.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="the model's dtype instead of the file's")
    _add_execution_args(ev)
    ev.add_argument("--envs", type=int, default=1,
                    help="episodes run at once through one engine (their chunks batched); default 1: one by one")
    ev.add_argument("--any-length", action="store_true",
                    help="--envs: batch every due chunk in one call (faster; equal to one by one up to float rounding, "
                    "not bit for bit: a closed loop may then end an episode differently)")
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
    ch.add_argument("--episodes", type=int, default=20)
    ch.add_argument("--seed", type=int, default=0)
    ch.add_argument("--params-file", type=Path, default=DEFAULT_PARAMS, help="the node's parameters YAML")
    ch.add_argument("--latencies", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3], help="seconds")
    ch.add_argument("--variants", nargs="+", choices=["naive", "aligned", "aligned+rtc"],
                    help="default: all three")
    ch.add_argument("--time-limit", type=float, default=12.0, help="seconds per episode")
    ch.add_argument("--engine-mode", choices=["oxygen", "sequential", "shared", "parallel", "action_only"],
                    help="default: the file's (action_only gives the same actions without the text work)")
    ch.add_argument("--num-threads", type=int, help="torch CPU threads")
    _add_execution_args(ch)
    ch.add_argument("--out", type=Path, default=ROOT / "docs" / "rtc", help="results.json, table.md, chunking.png")
    ch.add_argument("--combine", type=Path, nargs="+", metavar="FOLDER",
                    help="no new runs: one table and plot from earlier --out folders (e.g. one variant per process)")
    ch.add_argument("--quiet", action="store_true")
    ex = sub.add_parser("expert", help="the scripted expert's success rate on held-out seeds")
    ex.add_argument("--episodes", type=int, default=50)
    ex.add_argument("--seed", type=int, default=0)
    ex.add_argument("--quiet", action="store_true")
    _add_aloha_args(ex, "the scripted expert replays ACT's transfer-cube waypoints")
    ex.add_argument("--through-outputs", metavar="PARAMS_FILE",
                    help="--env aloha_*: the expert's actions as model outputs through this robot config's conversions "
                    "and controllers over DDS into the MuJoCo arm")
    ex.add_argument("--image-size", type=int, default=64, help="--through-outputs: camera images (the expert ignores them)")
    ex.add_argument("--fast-render", action=argparse.BooleanOptionalAction, default=True,
                    help="--through-outputs: no shadows, no anti-aliasing (default; --no-fast-render for the GIF's look)")
    from .record_cli import add_record_parser

    add_record_parser(sub)
    return parser


def _add_aloha_args(parser: argparse.ArgumentParser, note: str) -> None:
    from .aloha.cli import ENVS

    parser.add_argument("--env", choices=["tabletop", *ENVS], default="tabletop",
                        help=f"the simulator: the table-top arm (default) or the MuJoCo ALOHA (gym-aloha scenes; {note})")
    parser.add_argument("--timeout", type=float, default=7200.0, help="--env aloha_*: wall-time limit of the run in seconds")
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
    return args


def run(args: argparse.Namespace) -> int:
    """Run a checked command line; the ALOHA commands that start the ROS loop belong to ``oxygen-sim``
    (``oxygen_ros.apps.oxygen_sim``), above the ROS layer, and so does ``record`` (the bag writers live in
    ``oxygen_ros.replay``, above the simulator)."""
    if args.command == "record":
        print("oxygen-sim: record runs from the oxygen-sim command (oxygen_ros.apps.oxygen_sim)", file=sys.stderr)
        return 2
    if args.command in ("eval", "expert") and args.env != "tabletop":
        if getattr(args, "through_node", False) or getattr(args, "through_outputs", None):
            print("oxygen-sim: --through-node and --through-outputs run from the oxygen-sim command", file=sys.stderr)
            return 2
        from .aloha import cli as aloha_cli

        return aloha_cli.evaluate(args) if args.command == "eval" else aloha_cli.expert(args)
    if args.command == "eval":
        return _eval(args)
    if args.command == "chunking":
        return _chunking(args)
    return _expert(args)


def main(argv: list[str] | None = None) -> int:
    args = checked_args(argv)
    return args if isinstance(args, int) else run(args)


if __name__ == "__main__":
    raise SystemExit(main())
