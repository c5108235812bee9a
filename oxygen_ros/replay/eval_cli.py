"""``oxygen-replay eval``: the policy's commands on a recorded bag against what the robot was told (or did),
with thresholds for CI and a second policy side by side.

Exit codes: 0 within the thresholds; 1 a threshold exceeded (a line per dimension over its limit, worst first,
with its worst tick); 2 bad input, nothing judged (the bag, the parameters, the model); 3 judged on a damaged
bag (truncated, or messages that do not decode: the figures cover only what could be read; the note says
whether the thresholds held). The last line of stdout is the JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from oxygen_ros.cluster.args import add_ray_args, ray_refusal

from .eval_defaults import DEFAULT_GAP_S, DEFAULT_WARN_S

EXAMPLES = """examples:
  oxygen-sim record --env aloha_transfer_cube --episodes 2 --seed 12345 --bag expert.mcap
  oxygen-replay eval expert.mcap --params-file config/aloha_demo.yaml --max-mae 0.05 --max-mae '*gripper=0.3'
  oxygen-replay eval expert.mcap --params-file config/aloha_demo.yaml --compare other.yaml --out eval/
"""


def add_eval_parser(sub: Any, add_params: Any, add_common: Any) -> None:
    ev = sub.add_parser("eval", help="compare the policy's commands on a bag with the recorded commands or joint states",
                        description="Open-loop evaluation: at every tick the node would compute a chunk, the chunk goes "
                        "through the node's output chain (conversions, limits) and is compared over its horizon with the "
                        "bag's command topics (or the achieved joint states) at the instants its actions belong to.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ev.add_argument("bags", nargs="+", metavar="BAG",
                    help="input bag (.mcap, .db3 or rosbag2 folder); several, a folder of bags or a glob: each judged on "
                    "its own and all together, in one report (with --ray: one Ray task per bag)")  # fmt: skip
    add_params(ev)
    ev.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                    help="override one node parameter (YAML value), e.g. -p replan=tick (repeatable)")  # fmt: skip
    ev.add_argument("--against", choices=("auto", "commands", "states"), default="auto",
                    help="the recorded command topics, or the achieved joint states (default auto: commands where the "
                    "bag has every output's topic)")  # fmt: skip
    ev.add_argument("--seed", type=int, help="action noise seed, the same for --compare (default: the file's seed)")
    ev.add_argument("--engine-mode", default="action_only",
                    help="engine mode for the chunks (default action_only: text is not judged; 'file' for the file's)")  # fmt: skip
    ev.add_argument("--max-mae", action="append", default=[], metavar="[DIM=]LIMIT",
                    help="fail (exit 1) when a dimension's MAE is above LIMIT (robot units); DIM a dimension, an output "
                    "or a pattern like '*gripper'; repeatable")  # fmt: skip
    ev.add_argument("--max-rmse", action="append", default=[], metavar="[DIM=]LIMIT", help="the same for RMSE")
    ev.add_argument("--scope", choices=("executed", "horizon"), default="executed",
                    help="which steps the thresholds and --compare judge (default: the executed ones)")  # fmt: skip
    ev.add_argument("--compare", metavar="YAML", help="a second parameters file (checkpoint, config or conversion) on the same bag")
    ev.add_argument("--compare-node-name", metavar="NAME", help="--node-name of the --compare file")
    ev.add_argument("--out", metavar="DIR", help="write summary.json, ticks.csv (per tick and dimension; ticks_b.csv for --compare), steps.csv (per "
                    "horizon step and dimension), joints.png, horizon.png "
                    "here (default: <bag>_eval next to the bag)")  # fmt: skip
    ev.add_argument("--no-plots", action="store_true", help="no PNGs")
    add_ray_args(ev, "run each bag as a Ray task, one report for all")
    ev.add_argument("--episode-topic", default="/oxygen_sim_node/episode",
                    help="std_msgs/String episode events (JSON start/end): each episode judged on its own (default "
                    "%(default)s; without it, pauses in the joint states split the bag)")  # fmt: skip
    ev.add_argument("--episode-gap", type=float, default=DEFAULT_GAP_S, metavar="S",
                    help="without episode events, joint states silent this long end an episode (default %(default)s s)")  # fmt: skip
    ev.add_argument("--camera-offset-warn", type=float, default=DEFAULT_WARN_S, metavar="S",
                    help="warn when a camera's stamps sit this far from the joint states' (default %(default)s s)")  # fmt: skip
    add_common(ev)


def cmd_eval(args: argparse.Namespace, load_config: Any, error: type[Exception]) -> int:
    from tqdm import tqdm

    from .eval_report import print_comparison, print_inputs_and_episodes, print_table, print_warnings, write_files
    from .evaluate import EvalOptions, EvalReplay, compare
    from .metrics import judge, parse_limits

    try:
        max_mae, max_rmse = parse_limits(args.max_mae, "--max-mae"), parse_limits(args.max_rmse, "--max-rmse")
    except ValueError as exc:
        raise error(str(exc)) from None
    if not (args.episode_gap > 0 and args.camera_offset_warn >= 0):
        raise error("--episode-gap must be > 0 and --camera-offset-warn >= 0 (seconds)")
    if refusal := ray_refusal(args):
        raise error(refusal)
    options = EvalOptions(against=args.against, seed=args.seed, remap=args.remap_map, episode_topic=args.episode_topic,
                          engine_mode=None if args.engine_mode == "file" else args.engine_mode,
                          episode_gap_s=args.episode_gap, camera_offset_warn_s=args.camera_offset_warn)  # fmt: skip
    if args.ray is not None or len(args.bags) > 1 or not is_bag(args.bags[0]):
        from .bags_cli import cmd_eval_bags

        if args.compare:
            raise error("--compare judges one bag: give one bag, without --ray")
        return cmd_eval_bags(args, load_config(args.params_file, args.node_name), options, max_mae, max_rmse, error)
    args.bag = args.bags[0]
    out = Path(args.out) if args.out else _default_out(args.bag)
    runs = [(args.params_file, args.node_name)]
    if args.compare:
        runs.append((args.compare, args.compare_node_name))
    summaries, tables = [], []
    configs = [load_config(params, node) for params, node in runs]
    if options.seed is None:
        options.seed = configs[0].runtime.seed  # the same noise for both
    replays = [EvalReplay(args.bag, config, options) for config in configs]
    for replay in replays:
        replay.check_bag()  # every bag problem before any model loads
    for n, replay in enumerate(replays):
        label = "eval" if len(runs) == 1 else f"eval {'AB'[n]}"
        with tqdm(total=1000, desc=label, disable=args.quiet, file=sys.stderr, bar_format="{l_bar}{bar}| {elapsed}<{remaining}") as bar:
            def progress(fraction: float, _text: str, bar: Any = bar) -> None:
                bar.n = round(fraction * 1000)
                bar.refresh()

            replay.progress = progress
            summaries.append(replay.evaluate())
        tables.append(replay.table)
    result: dict[str, Any] = dict(summaries[0])
    labels = [Path(p or "defaults").stem for p, _ in runs]
    if len(runs) == 2 and labels[0] == labels[1]:
        labels = ["A", "B"]
    result["files"] = write_files(tables, labels, summaries[0], out, not args.no_plots)
    if len(runs) == 2:
        result["compare"] = {"params": summaries[1]["params"], "model": summaries[1]["model"],
                             **compare(summaries[0], summaries[1], args.scope), "b": summaries[1]}  # fmt: skip
    verdict = judge(summaries[0], max_mae, max_rmse, args.scope)
    failures, damage = verdict.failures, verdict.damage
    result["passed"] = not failures
    result["failures"] = [f.line(args.scope) for f in failures]
    result["exit_code"] = verdict.exit_code
    (out / "summary.json").write_text(json.dumps(result, indent=1))
    print_warnings(summaries[0])
    print_table(summaries[0], sys.stdout)
    print_inputs_and_episodes(summaries[0], sys.stdout)
    if len(runs) == 2:
        print_comparison(result["compare"], labels, sys.stdout)
    for failure in failures:  # every dimension over its limit, worst first, one line each
        print(f"oxygen-replay: eval failed: {failure.line(args.scope)}", file=sys.stderr)
    if damage:
        held = f"{len(failures)} dimensions over their limits" if failures else "within the thresholds"
        print(f"oxygen-replay: eval judged a damaged bag ({damage}): {held} on what could be read (exit 3)", file=sys.stderr)
    print(json.dumps(result))
    return result["exit_code"]


def is_bag(path: str) -> bool:
    """A bag file, or a rosbag2 folder (its metadata.yaml); not a folder of bags, nor a glob."""
    p = Path(path)
    return (p.is_dir() and (p / "metadata.yaml").is_file()) or (not p.is_dir() and not any(c in path for c in "*?["))


def _default_out(bag: str) -> Path:
    p = Path(bag)
    return p.parent / f"{p.name if p.is_dir() else p.stem}_eval"
