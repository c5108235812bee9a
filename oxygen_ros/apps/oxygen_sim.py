"""``oxygen-sim``: the simulator's commands (``oxygen_ros.sim.cli``), and the ALOHA commands that run the policy
node and the simulator node over DDS in one process (``oxygen_ros.sim_ros.aloha_loop``):

    oxygen-sim expert --env aloha_transfer_cube --episodes 50 --seed 0 --through-outputs config/robots/aloha.yaml
    oxygen-sim eval --env aloha_transfer_cube --params-file my_aloha.yaml --through-node --gif out/aloha/episode.gif

and ``oxygen-sim record``, the scripted experts written as robots' bags by ``oxygen_ros.replay.expert_bags`` (above
the simulator; no DDS).

Both keep DDS on this machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST unless set). They live here, above the
ROS layer, so the simulator below never imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from oxygen_ros.sim import cli_args
from oxygen_ros.sim.aloha.cli import episode_summary, expert_summary, params_file_of, task_of


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


def expert_through_outputs(args: argparse.Namespace) -> int:
    """The scripted expert directly, then its actions as model outputs through the robot config's conversions
    and the policy node, against the simulator node."""
    summary = expert_summary(args)
    if summary is None:
        return 2
    seeds = list(range(args.seed, args.seed + args.episodes))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    from oxygen_ros.sim.aloha.recording import GIF_EVERY_STEPS
    from oxygen_ros.sim_ros.aloha_loop import through_outputs

    with tempfile.TemporaryDirectory() as work:
        result, scripted = through_outputs(Path(args.through_outputs), seeds, Path(work), image_size=(args.image_size,) * 2,
                                           fast_render=args.fast_render, timeout_s=args.timeout,
                                           gif_every_steps=GIF_EVERY_STEPS if args.gif else 0)  # fmt: skip
    through = episode_summary(result.episodes)
    summary = {"env": args.env, "through_outputs": str(args.through_outputs), **through,
               "expert_success_rate": summary["success_rate"],
               "relative_success": round(through["success_rate"] / summary["success_rate"], 3) if summary["success_rate"] else None,
               "seed": args.seed, "stale_frames": scripted.stale_frames, **_loop_figures(result)}  # fmt: skip
    if args.gif and result.frames:
        from oxygen_ros.sim.media import write_frames_gif

        summary["gif"] = str(write_frames_gif(result.frames, Path(args.gif)))
    print(json.dumps(summary))
    return 0


def through_node(args: argparse.Namespace, params_file: Path) -> int:
    """oxygen_node and the simulator node over DDS in lockstep (``oxygen_ros.sim_ros.aloha_loop``)."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    from oxygen_ros.sim.aloha.recording import GIF_EVERY_STEPS
    from oxygen_ros.sim_ros.aloha_loop import node_values, run_loop
    from oxygen_ros.runtime import RuntimeLoadError
    from oxygen_ros.runtime.params_file import ParamsFileError

    overrides = {k: v for k, v in (("device", args.device), ("dtype", args.dtype), ("num_threads", args.num_threads)) if v is not None}
    try:
        values = node_values(params_file, overrides)
    except (OSError, ParamsFileError) as exc:
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 2
    seeds = list(range(args.seed, args.seed + args.episodes))
    widths, heights = values.get("camera_widths") or [], values.get("camera_heights") or []
    # the file's camera size, else the model's (square): the loop without DDS renders the same
    height, width = args.image_height or (heights[0] if heights else 0), args.image_width or (widths[0] if widths else 0)
    image_size = (height, width) if height and width else None
    try:
        result = run_loop(values, seeds, task_of(args.env), image_size=image_size, fast_render=args.fast_render,
                          gif_every_steps=GIF_EVERY_STEPS if args.gif else 0, timeout_s=args.timeout)  # fmt: skip
    except (RuntimeLoadError, ValueError) as exc:
        print(f"oxygen-sim: {exc}", file=sys.stderr)
        return 1
    summary: dict[str, Any] = {"env": args.env, **episode_summary(result.episodes), "seed": args.seed,
                               "params_file": str(params_file), **_loop_figures(result)}  # fmt: skip
    if args.gif and result.frames:
        from oxygen_ros.sim.media import write_frames_gif

        summary["gif"] = str(write_frames_gif(result.frames, Path(args.gif)))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"summary": summary, "episodes": result.episodes}, indent=1))
    print(json.dumps(summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = cli_args.checked_args(argv)  # before torch loads: --help and a refused line answer at once
    if isinstance(args, int):
        return args
    if args.command == "record":
        from oxygen_ros.replay.expert_bags.record import record

        return record(args)
    if args.command in ("eval", "expert") and args.env != "tabletop":
        if args.command == "eval" and args.through_node:
            return through_node(args, params_file_of(args))
        if args.command == "expert" and args.through_outputs:
            return expert_through_outputs(args)
    from oxygen_ros.sim import cli as sim_cli

    return sim_cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
