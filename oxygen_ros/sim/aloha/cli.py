"""``oxygen-sim expert|eval --env aloha_<task>``: the MuJoCo ALOHA's scripted expert and closed-loop evaluation.

    oxygen-sim expert --env aloha_transfer_cube --episodes 50 --seed 0
    oxygen-sim expert --env aloha_transfer_cube --episodes 50 --seed 0 --through-outputs config/robots/aloha.yaml
    oxygen-sim eval --env aloha_transfer_cube --params-file my_aloha.yaml --episodes 20 --gif out/aloha/episode.gif

The last line printed is one JSON object (``success_rate`` first). ``--through-outputs`` and ``eval`` run the
policy node and the simulator node in one process over DDS, kept on this machine
(ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST unless set).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ENV_PREFIX = "aloha_"
ENVS = ("aloha_transfer_cube", "aloha_insertion")
GIF_EVERY_STEPS = 5  # a GIF frame every 0.1 s of sim time, shown at 10 fps: real time


def task_of(env: str) -> str:
    return env.removeprefix(ENV_PREFIX)


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def _episode_summary(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """success_rate, mean steps and time to success (s) of finished episodes."""
    from .units import DT

    ok = [e["success_step"] for e in episodes if e["success"]]
    return {"success_rate": len(ok) / max(1, len(episodes)), "mean_success_step": _mean(ok),
            "mean_time_to_success_s": _mean([s * DT for s in ok]),
            "mean_episode_steps": _mean([e["steps"] for e in episodes]), "episodes": len(episodes)}  # fmt: skip


def _direct(seeds: list[int], task: str, quiet: bool) -> list[dict[str, Any]]:
    from tqdm import tqdm

    from .expert import expert_episode, replay

    out = []
    for seed in tqdm(seeds, desc="expert", disable=quiet, file=sys.stderr):
        plan = expert_episode(seed, task)
        step = replay(plan.actions, seed, task)
        out.append({"seed": seed, "success": step is not None, "success_step": step,
                    "steps": step or plan.steps, "ee_reward": plan.ee_reward})  # fmt: skip
    return out


def _loop_figures(result: Any) -> dict[str, Any]:
    """The closed loop's timing: answers, lockstep timeouts, rates in sim and wall time, render cost."""
    s, d = result.sim_stats, result.diagnostics
    return {"query_every_steps": result.query_every_steps, "chunks": s["answers"], "queries": s["queries"],
            "stale_answers": s["stale_answers"], "lockstep_timeouts": s["timeouts"], "rejected_commands": s["rejected"], "sim_s": round(result.sim_s, 2),
            "wall_s": round(result.wall_s, 2),
            "steps_per_wall_s": round(sum(e["steps"] for e in result.episodes) / result.wall_s, 1),
            "render_ms_per_frame": round(1e3 * s["render_s"] / max(1, s["frames"]), 1),
            "node_chunk_latency_max_s_sim_time": d.get("chunk_latency_s max"),
            "node_deadline_misses_wall_time": d.get("deadline_misses")}  # fmt: skip


def expert(args: argparse.Namespace) -> int:
    task = task_of(args.env)
    if task != "transfer_cube":
        print(f"oxygen-sim: no scripted expert for {args.env} (ACT's insertion waypoints do not replay in the "
              "joint-space scene); there is one for aloha_transfer_cube", file=sys.stderr)  # fmt: skip
        return 2
    seeds = list(range(args.seed, args.seed + args.episodes))
    direct = _direct(seeds, task, args.quiet)
    summary: dict[str, Any] = {"env": args.env, **_episode_summary(direct), "seed": args.seed,
                               "ee_success_rate": sum(e["ee_reward"] >= 4 for e in direct) / len(direct)}  # fmt: skip
    if args.through_outputs:
        os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
        from oxygen_ros.ros.aloha_loop import through_outputs

        with tempfile.TemporaryDirectory() as work:
            result, scripted = through_outputs(Path(args.through_outputs), seeds, Path(work), image_size=(args.image_size,) * 2,
                                               fast_render=args.fast_render, timeout_s=args.timeout,
                                               gif_every_steps=GIF_EVERY_STEPS if args.gif else 0)  # fmt: skip
        through = _episode_summary(result.episodes)
        summary = {"env": args.env, "through_outputs": str(args.through_outputs), **through,
                   "expert_success_rate": summary["success_rate"],
                   "relative_success": round(through["success_rate"] / summary["success_rate"], 3) if summary["success_rate"] else None,
                   "seed": args.seed, "stale_frames": scripted.stale_frames, **_loop_figures(result)}  # fmt: skip
        if args.gif and result.frames:
            summary["gif"] = str(write_gif(result.frames, Path(args.gif)))
    print(json.dumps(summary))
    return 0


def evaluate(args: argparse.Namespace) -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    from oxygen_ros.ros.aloha_loop import node_values, run_loop
    from oxygen_ros.runtime import RuntimeLoadError
    from oxygen_ros.runtime.params_file import ParamsFileError

    from ..cli import DEFAULT_PARAMS

    if Path(args.params_file).resolve() == DEFAULT_PARAMS.resolve():
        print(f"oxygen-sim: --env {args.env} needs --params-file: your copy of config/robots/aloha.yaml with your "
              "checkpoint (the default file is the table-top demo's)", file=sys.stderr)  # fmt: skip
        return 2
    try:
        values = node_values(args.params_file)
    except (OSError, ParamsFileError) as exc:
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 2
    seeds = list(range(args.seed, args.seed + args.episodes))
    try:
        result = run_loop(values, seeds, task_of(args.env), image_size=(args.image_height, args.image_width),
                          fast_render=args.fast_render, gif_every_steps=GIF_EVERY_STEPS if args.gif else 0, timeout_s=args.timeout)  # fmt: skip
    except (RuntimeLoadError, ValueError) as exc:
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 1
    summary: dict[str, Any] = {"env": args.env, **_episode_summary(result.episodes), "seed": args.seed,
                               "params_file": str(args.params_file), **_loop_figures(result)}  # fmt: skip
    if args.gif and result.frames:
        summary["gif"] = str(write_gif(result.frames, Path(args.gif)))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"summary": summary, "episodes": result.episodes}, indent=1))
    print(json.dumps(summary))
    return 0


def write_gif(frames: list, path: Path, fps: float = 10.0) -> Path:
    """The frames (RGB arrays) as an animated GIF at ``fps``."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
    return path
