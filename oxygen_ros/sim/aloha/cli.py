"""``oxygen-sim expert|eval --env aloha_<task>``: the MuJoCo ALOHA's scripted expert and closed-loop evaluation.

    oxygen-sim expert --env aloha_transfer_cube --episodes 50 --seed 0
    oxygen-sim expert --env aloha_transfer_cube --episodes 50 --seed 0 --through-outputs config/robots/aloha.yaml
    oxygen-sim eval --env aloha_transfer_cube --episodes 20 --seed 0 --questions 2 --gif out/aloha/episode.gif
    oxygen-sim eval --env aloha_transfer_cube --episodes 20 --seed 0 --expert-as-model   # the loop's oracle
    oxygen-sim eval --env aloha_transfer_cube --params-file my_aloha.yaml --through-node --gif out/aloha/episode.gif

The last line printed is one JSON object (``success_rate`` first). ``eval`` runs the closed loop without DDS
(``oxygen_ros.sim.evaluate`` with the ALOHA episode), from config/aloha_demo.yaml unless --params-file says
otherwise, and prints the table-top eval's keys (``narration_accuracy``, ``memory_accuracy``,
``answer_accuracy``). ``--through-outputs`` and ``eval --through-node`` run the policy node and the simulator
node in one process over DDS: ``oxygen_ros.apps.oxygen_sim`` runs them, above the ROS layer.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from ..cli_common import DEFAULT_PARAMS, collect, in_spec_order, shown, with_overrides, with_run_settings

ENV_PREFIX = "aloha_"
ALOHA_DEMO_PARAMS = Path(__file__).resolve().parents[3] / "config" / "aloha_demo.yaml"  # --env aloha_* without --params-file
ENVS = ("aloha_transfer_cube", "aloha_insertion")


def task_of(env: str) -> str:
    return env.removeprefix(ENV_PREFIX)


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def episode_summary(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """success_rate, mean steps and time to success (s) of finished episodes, the early failures per reason."""
    from ..evaluate import failure_counts
    from .units import DT

    ok = [e["success_step"] for e in episodes if e["success"]]
    return {"success_rate": len(ok) / max(1, len(episodes)), "mean_success_step": _mean(ok),
            "mean_time_to_success_s": _mean([s * DT for s in ok]),
            "mean_episode_steps": _mean([e["steps"] for e in episodes]), "episodes": len(episodes),
            "failures": failure_counts([e.get("failure") for e in episodes])}  # fmt: skip


def _direct(seeds: list[int], task: str, quiet: bool) -> list[dict[str, Any]]:
    from tqdm import tqdm

    from .expert import expert_episode, replay

    from .physics import SceneUnstable

    out = []
    for seed in tqdm(seeds, desc="expert", disable=quiet, file=sys.stderr):
        plan = expert_episode(seed, task)
        try:
            step, failure = replay(plan.actions, seed, task), None
        except SceneUnstable as exc:  # the episode fails; the next one runs
            step, failure = None, exc.failure
        out.append({"seed": seed, "success": step is not None, "success_step": step,
                    "steps": step or plan.steps, "ee_reward": plan.ee_reward, "failure": failure})  # fmt: skip
    return out


def expert_summary(args: argparse.Namespace) -> dict[str, Any] | None:
    """The scripted expert's episodes replayed directly; None (said on stderr) for a task without an expert."""
    task = task_of(args.env)
    if task != "transfer_cube":
        print(f"oxygen-sim: no scripted expert for {args.env} (ACT's insertion waypoints do not replay in the "
              "joint-space scene); there is one for aloha_transfer_cube", file=sys.stderr)  # fmt: skip
        return None
    seeds = list(range(args.seed, args.seed + args.episodes))
    direct = _direct(seeds, task, args.quiet)
    summary: dict[str, Any] = {"env": args.env, **episode_summary(direct), "seed": args.seed,
                               "ee_success_rate": sum(e["ee_reward"] >= 4 for e in direct) / len(direct)}  # fmt: skip
    return summary


def expert(args: argparse.Namespace) -> int:
    summary = expert_summary(args)
    if summary is None:
        return 2
    print(json.dumps(summary))
    return 0


def params_file_of(args: argparse.Namespace) -> Path:
    """--params-file, or config/aloha_demo.yaml where it was left at the table-top's default."""
    return ALOHA_DEMO_PARAMS if Path(args.params_file).resolve() == DEFAULT_PARAMS.resolve() else Path(args.params_file)


def evaluate(args: argparse.Namespace) -> int:
    return _offline(args, params_file_of(args))


def _offline(args: argparse.Namespace, params_file: Path) -> int:
    """The closed loop without DDS (``oxygen_ros.sim.evaluate``): the same JSON keys as the table-top eval."""
    import time
    from contextlib import nullcontext

    import torch

    from oxygen_ros.runtime import PolicyRuntime, RuntimeLoadError
    from oxygen_ros.runtime.params_file import ParamsFileError

    from ..evaluate import EpisodeLoop, answers_by_kind, drive, evaluate as run_all, summarize
    from .evaluation import eval_config, episode_specs, expert_as_model, load_params, small_checkpoint
    from .recording import GIF_STEPS_AFTER_SUCCESS, EpisodeRecorder

    if args.expert_as_model and args.envs > 1:
        print("oxygen-sim: --expert-as-model runs one environment (its expert follows one episode at a time)", file=sys.stderr)
        return 2
    with small_checkpoint() if args.expert_as_model else nullcontext({}) as overrides:
        try:
            if args.no_limits:
                from oxygen_ros.runtime.safety import UNGUARDED

                overrides = {**overrides, **UNGUARDED}
            params = load_params(params_file, overrides)
            config = with_overrides(eval_config(params.config, args.tokens_per_frame, args.engine_mode), args)
            settings = with_run_settings(params.settings, args)
            if args.time_limit:
                settings = dataclasses.replace(settings, time_limit_s=args.time_limit)
        except (OSError, ParamsFileError, ValueError, TypeError) as exc:
            hint = (" (models/aloha comes from `oxygen-train-demo --env aloha_transfer_cube`; or give --params-file, "
                    "or --expert-as-model)") if params_file == ALOHA_DEMO_PARAMS and "checkpoint" in str(exc) else ""  # fmt: skip
            print(f"oxygen-sim: {params_file}: {exc}{hint}", file=sys.stderr)
            return 2
        try:
            if args.expert_as_model:
                runtime, expert, running = expert_as_model(config)
            else:
                runtime, expert, running = PolicyRuntime.load(config), None, None
        except RuntimeLoadError as exc:
            hint = " (--device cpu runs it on the CPU)" if "CUDA is not available" in str(exc) else ""
            print(f"oxygen-sim: {exc}{hint}", file=sys.stderr)
            return 1
        kept = {"instruction": args.instruction} if args.instruction is not None else {}
        try:
            specs = [dataclasses.replace(s, **kept) for s in episode_specs(params.wiring, args.seed, args.episodes, on_start=running)]
        except ValueError as exc:
            print(f"oxygen-sim: {exc}", file=sys.stderr)
            return 2
        started = time.perf_counter()
        results, gif = [], None
        with torch.inference_mode():
            if args.gif:  # the first episode recorded: the same episode, run on 1 s past a hand-over (same outcome)
                loop = EpisodeLoop(runtime, dataclasses.replace(specs[0], steps_after_success=GIF_STEPS_AFTER_SUCCESS), settings)
                recorder = EpisodeRecorder(loop)
                results.append(drive(loop))
                gif = recorder.write(results[0], Path(args.gif))
        try:
            results += collect(run_all(runtime, specs[len(results):], settings, args.envs, exact=not args.any_length),
                               len(specs) - len(results), f"eval {args.env}", args.quiet)  # fmt: skip
        except ValueError as exc:  # e.g. --envs with a mode that serves one robot only
            print(f"oxygen-sim: {exc}", file=sys.stderr)
            return 2
        wall_s = time.perf_counter() - started
    results = in_spec_order(results, specs)
    summary: dict[str, Any] = {**summarize(results, runtime, settings), "env": args.env, "seed": args.seed,
                               "envs": args.envs, "params_file": shown(params_file), "expert_as_model": args.expert_as_model,
                               "decode_steps_per_chunk": config.tokens_per_frame, "image_size": runtime.image_size,
                               "wall_s": round(wall_s, 2), "wall_s_per_episode": round(wall_s / len(results), 2)}  # fmt: skip
    if settings.questions:
        summary["answers_by_kind"] = answers_by_kind(results, str)  # per true answer: the table-top's kinds do not apply
    if expert is not None:
        summary["stale_frames"] = expert.stale_frames
    if gif is not None:
        summary["gif"] = shown(gif)
    if args.json_out:
        episodes = [{"seed": r.spec.seed, "place": r.place, "success": r.success, "time_to_success_s": r.time_to_success_s,
                     "failure": r.failure,
                     "chunks": r.chunks, "rejected": r.rejected, "texts": [vars(t) for t in r.texts]} for r in results]  # fmt: skip
        Path(args.json_out).write_text(json.dumps({"summary": summary, "episodes": episodes}, indent=1))
    print(json.dumps(summary))
    return 0
