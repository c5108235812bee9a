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
import sys
import time
from pathlib import Path

from tqdm import tqdm

from oxygen_ros.runtime import RuntimeConfig, RuntimeLoadError
from oxygen_ros.runtime.params_file import ParamsFileError, read_params_file
from oxygen_ros.runtime.paths import with_resolved_paths
from oxygen_ros.runtime.trajectory import JointLimits

from .cli_args import build_parser, checked_args  # noqa: F401 (the command line, read before torch loads)
from .dataset import expert_episode
from .episode import DEFAULT_TIME_LIMIT_S, EVAL_FAMILIES, EpisodeSpec
from .scene import Scene
from .variation import Lighting
from .cli_common import collect, in_spec_order, shown, with_overrides, with_run_settings
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
    if args.ray is not None:
        return _eval_on_ray(args, config, settings, specs)
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
    return _report(args, in_spec_order(results, specs), runtime.config, settings, time.perf_counter() - started)


def _eval_on_ray(args: argparse.Namespace, config: RuntimeConfig, settings: EvalSettings, specs: list[EpisodeSpec]) -> int:
    """The same evaluation as Ray tasks (``ray_eval``); exit status 1 where a task failed twice."""
    from .ray_eval import RayEvaluation, RayOptions

    if args.envs > 1 and config.engine_mode not in ("oxygen", "action_only"):
        print(f"oxygen-sim: --envs needs engine_mode oxygen or action_only, not {config.engine_mode!r}", file=sys.stderr)
        return 2
    if not config.num_threads:  # the same torch thread count on every node (reductions split by thread count)
        config = dataclasses.replace(config, num_threads=max(1, int(args.ray_cpus)))
    options = RayOptions(args.ray, args.ray_cpus, args.ray_gpus, args.ray_shards)
    run = RayEvaluation(config, settings, specs, args.envs, not args.any_length, options)
    started = time.perf_counter()
    try:
        results = collect(run, len(specs), f"eval {config.engine_mode} on ray", args.quiet)
    except KeyboardInterrupt:
        print("oxygen-sim: interrupted; the Ray tasks still running were cancelled", file=sys.stderr)
        return 130
    for failed in run.failed:
        print(f"oxygen-sim: a Ray task failed twice, its episodes (seeds {failed['seeds']}) not run: {failed['error']}",
              file=sys.stderr)  # fmt: skip
    status = _report(args, in_spec_order(results, specs), run.config, settings, time.perf_counter() - started,
                     ray=run.summary())  # fmt: skip
    return 1 if run.failed else status


def _report(args: argparse.Namespace, results: list, config: RuntimeConfig, settings: EvalSettings, wall_s: float,
            **extra: object) -> int:  # fmt: skip
    """The summary line (and --json-out's file) of an evaluation's results."""
    summary = summarize(results, config, settings)
    summary["seed"] = args.seed
    summary["envs"] = args.envs
    summary["wall_s"] = round(wall_s, 2)
    summary["action_batches"] = "any length" if args.any_length else "exact"
    summary.update(extra)
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
