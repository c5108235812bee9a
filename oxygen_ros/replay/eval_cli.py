"""``oxygen-replay eval``: the policy's commands on a recorded bag against what the robot was told (or did),
with thresholds for CI and a second policy side by side.

Exit codes: 0 within the thresholds, 1 a threshold exceeded (one line names the worst dimension and tick),
2 bad input (the bag, the parameters, the model). The last line of stdout is the JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

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
    ev.add_argument("bag", help="input bag (.mcap, .db3 or rosbag2 folder)")
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
    ev.add_argument("--episode-topic", default="/oxygen_sim_node/episode",
                    help="std_msgs/String episode events (JSON); a chunk is not compared across an episode start")  # fmt: skip
    add_common(ev)


def cmd_eval(args: argparse.Namespace, load_config: Any, error: type[Exception]) -> int:
    from tqdm import tqdm

    from .eval_plots import plot_horizon, plot_timelines
    from .eval_report import print_comparison, print_table, write_steps_csv, write_ticks_csv
    from .evaluate import EvalOptions, compare, evaluate_bag
    from .metrics import check_limits, parse_limits

    try:
        max_mae, max_rmse = parse_limits(args.max_mae, "--max-mae"), parse_limits(args.max_rmse, "--max-rmse")
    except ValueError as exc:
        raise error(str(exc)) from None
    out = Path(args.out) if args.out else _default_out(args.bag)
    options = EvalOptions(against=args.against, seed=args.seed, remap=args.remap_map, episode_topic=args.episode_topic,
                          engine_mode=None if args.engine_mode == "file" else args.engine_mode)  # fmt: skip
    runs = [(args.params_file, args.node_name)]
    if args.compare:
        runs.append((args.compare, args.compare_node_name))
    summaries, tables = [], []
    for n, (params, node) in enumerate(runs):
        config = load_config(params, node)
        if n == 1 and options.seed is None:
            options.seed = summaries[0]["seed"]  # the same noise as the first
        label = "eval" if len(runs) == 1 else f"eval {'AB'[n]}"
        with tqdm(total=1000, desc=label, disable=args.quiet, file=sys.stderr, bar_format="{l_bar}{bar}| {elapsed}<{remaining}") as bar:
            def progress(fraction: float, _text: str, bar: Any = bar) -> None:
                bar.n = round(fraction * 1000)
                bar.refresh()

            summary, table = evaluate_bag(args.bag, config, options, progress)
        summaries.append(summary)
        tables.append(table)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = dict(summaries[0])
    files = {"ticks_csv": str(write_ticks_csv(tables[0], out / "ticks.csv")),
             "steps_csv": str(write_steps_csv(tables[0], out / "steps.csv"))}
    labels = [Path(p or "defaults").stem for p, _ in runs]
    if len(runs) == 2:
        if labels[0] == labels[1]:
            labels = ["A", "B"]
        files["ticks_b_csv"] = str(write_ticks_csv(tables[1], out / "ticks_b.csv"))
        result["compare"] = {"params": summaries[1]["params"], "model": summaries[1]["model"],
                             **compare(summaries[0], summaries[1], args.scope), "b": summaries[1]}  # fmt: skip
    if not args.no_plots:
        files["joints_png"] = str(plot_timelines(tables, labels, out / "joints.png"))
        files["horizon_png"] = str(plot_horizon(tables, labels, summaries[0]["executed_steps"], out / "horizon.png"))
    result["files"] = files
    failures = check_limits(summaries[0], {d: o for o, ds in summaries[0]["outputs"].items() for d in ds}, max_mae,
                            max_rmse, args.scope)  # fmt: skip
    result["passed"] = not failures
    result["failures"] = [f.line(args.scope) for f in failures]
    (out / "summary.json").write_text(json.dumps(result, indent=1))
    for warning in summaries[0]["warnings"]:
        print(f"oxygen-replay: warning: {warning}", file=sys.stderr)
    print_table(summaries[0], sys.stdout)
    if len(runs) == 2:
        print_comparison(result["compare"], labels, sys.stdout)
    if failures:
        print(f"oxygen-replay: eval failed: {failures[0].line(args.scope)}"
              + (f" (and {len(failures) - 1} more over their limits)" if len(failures) > 1 else ""), file=sys.stderr)  # fmt: skip
    print(json.dumps(result))
    return 1 if failures else 0


def _default_out(bag: str) -> Path:
    p = Path(bag)
    return p.parent / f"{p.name if p.is_dir() else p.stem}_eval"
