"""``oxygen-replay eval`` on several bags (a folder, a glob, a list), on this machine one after another or
with ``--ray`` one Ray task per bag: one report (each bag's table and verdict, the figures over all bags with
the thresholds applied to them too, the worst bag named), exit codes as `bags_eval.combined_report` says."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from .bags_eval import BagOutcome, combined_report, judge_bag, resolve_bags
from .config import ReplayConfig
from .eval_report import print_dims, print_warnings, write_files
from .evaluate import EvalOptions


def cmd_eval_bags(args: argparse.Namespace, config: ReplayConfig, options: EvalOptions, max_mae: Mapping[str, float],
                  max_rmse: Mapping[str, float], error: type[Exception]) -> int:  # fmt: skip
    from tqdm import tqdm

    try:
        bags = [str(b.resolve()) for b in resolve_bags(args.bags)]
    except ValueError as exc:
        raise error(str(exc)) from None
    if options.seed is None:
        options.seed = config.runtime.seed
    out = Path(args.out) if args.out else _default_out(args.bags, bags)
    run, cluster = _outcomes(args, bags, config, options)
    by_bag: dict[str, BagOutcome] = {}
    where = " on ray" if args.ray is not None else ""
    try:
        with contextlib.closing(run), tqdm(total=len(bags), desc=f"eval {len(bags)} bags{where}", unit="bag",
                                             disable=args.quiet, file=sys.stderr) as bar:  # fmt: skip
            for outcome in run:
                by_bag[outcome.bag] = outcome
                bar.update(1)
    except KeyboardInterrupt:
        if cluster is not None:
            print("oxygen-replay: interrupted; the Ray tasks still running were cancelled", file=sys.stderr)
        raise
    outcomes = [by_bag[b] for b in bags]
    report = combined_report(outcomes, (max_mae, max_rmse), args.scope)
    if cluster is not None:
        report["ray"] = cluster.summary()
    _write(report, outcomes, out, not args.no_plots)
    _print(report, args.scope, sys.stdout)
    print(json.dumps(report))
    return int(report["exit_code"])


def _outcomes(args: argparse.Namespace, bags: list[str], config: ReplayConfig,
              options: EvalOptions) -> tuple[Iterator[BagOutcome], Any]:  # fmt: skip
    """The bags' outcomes as they come, and the Ray run (None on this machine)."""
    if args.ray is None:
        from oxygen_ros.runtime import RuntimeLoadError

        from .bagio import BagError
        from .evaluate import EvalError

        return (judge_bag(b, config, options, (EvalError, BagError, RuntimeLoadError)) for b in bags), None
    from oxygen_ros.cluster.tasks import RayOptions

    from .ray_bags import RayBags

    if not config.runtime.num_threads:  # the same torch thread count on every node (reductions split by thread count)
        config = dataclasses.replace(config, runtime=dataclasses.replace(config.runtime, num_threads=max(1, int(args.ray_cpus))))
    cluster = RayBags(bags, config, options, RayOptions(args.ray, args.ray_cpus, args.ray_gpus))
    return iter(cluster), cluster


def _default_out(arguments: list[str], bags: list[str]) -> Path:
    """``<folder>_eval`` for one folder of bags, else ``bags_eval`` in the bags' common folder."""
    if len(arguments) == 1 and Path(arguments[0]).is_dir():
        folder = Path(arguments[0]).resolve()
        return folder.parent / f"{folder.name}_eval"
    return Path(os.path.commonpath([str(Path(b).parent) for b in bags])) / "bags_eval"


def _write(report: dict[str, Any], outcomes: Iterable[BagOutcome], out: Path, plots: bool) -> None:
    """Per judged bag its CSVs (and PNGs) in a folder of its own; summary.json for the whole."""
    used: set[str] = set()
    rows = {r["bag"]: r for r in report["bags"]}
    for outcome in outcomes:
        if outcome.table is None or outcome.summary is None:
            continue
        name = Path(outcome.bag).stem
        while name in used:
            name += "_"
        used.add(name)
        rows[outcome.bag]["files"] = write_files([outcome.table], [name], outcome.summary, out / name, plots)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(report, indent=1))
    report["files"] = {"summary_json": str(out / "summary.json")}


def _print(report: dict[str, Any], scope: str, out: TextIO) -> None:
    """Warnings and failures on stderr; per bag its executed-steps MAE by dimension, then the whole's table."""
    for row in report["bags"]:
        print_warnings(row["summary"], f"{Path(row['bag']).name}: ")
    for missing in report["not_judged"]:
        print(f"oxygen-replay: eval: {missing['bag']} not judged: {missing['error']}", file=sys.stderr)
    if report["overall"] is None:
        print(f"oxygen-replay: eval: none of the {len(report['not_judged'])} bags could be judged", file=sys.stderr)
        return
    dims = list(report["overall"]["dims"])
    width = max(len(Path(r["bag"]).name) for r in report["bags"]) + 2
    print(f"eval of {len(report['bags'])} bags, executed-steps MAE per bag and dimension ({scope} steps judged):", file=out)
    print(f"  {'bag':<{width}} {'chunks':>6} " + " ".join(f"{d[:9]:>9}" for d in dims) + "  verdict", file=out)
    for row in report["bags"]:
        cells = " ".join(_cell(row["summary"]["dims"].get(d, {}).get("executed", {}).get("mae")) for d in dims)
        verdict = "pass" if row["passed"] else f"{len(row['failures'])} over"
        verdict += f", damaged ({row['damage']})" if row["damage"] else ""
        print(f"  {Path(row['bag']).name:<{width}} {row['summary']['chunks']:>6} {cells}  {verdict}", file=out)
    overall = report["overall"]
    print(f"all {len(report['bags'])} bags ({overall['bag_duration_s']:.1f} s, {overall['chunks']} chunks):", file=out)
    print_dims(overall, out)
    if report["worst_bag"]:
        worst = report["worst_bag"]
        print(f"worst bag: {worst['bag']} (mean executed MAE {worst['mean_executed_mae']:.4f}, worst {worst['worst_dim']})", file=out)
    for failure in report["failures"]:
        print(f"oxygen-replay: eval failed: {failure}", file=sys.stderr)


def _cell(value: float | None) -> str:
    return f"{'-':>9}" if value is None else f"{value:>9.4f}"
