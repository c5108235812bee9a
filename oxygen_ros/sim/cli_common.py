"""What ``oxygen-sim``'s table-top and ALOHA commands share: the default parameters file, the command line's
overrides of a configuration, and collecting episode results."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from oxygen_ros.runtime import RuntimeConfig

if TYPE_CHECKING:  # evaluate imports torch; the command line is read without it
    from .evaluate import EvalSettings

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PARAMS = ROOT / "config" / "demo_policy.yaml"


def shown(path: str | Path) -> str:
    """A path for a results file: relative to the repository when inside it (no machine paths in records)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def with_overrides(config: RuntimeConfig, args: argparse.Namespace) -> RuntimeConfig:
    """The command line's threads, device, dtype, real-time chunking and execution horizon over the file's (validated)."""
    overrides = {"num_threads": args.num_threads, "rtc": getattr(args, "rtc", None), "replan": args.replan,
                 "n_action_steps": args.n_action_steps, "device": getattr(args, "device", None),
                 "dtype": getattr(args, "dtype", None)}
    return dataclasses.replace(config, **{k: v for k, v in overrides.items() if v is not None}).validate()


def with_run_settings(settings: EvalSettings, args: argparse.Namespace) -> EvalSettings:
    """The command line's latency, time alignment, blank cameras and questions over the file's settings."""
    return dataclasses.replace(settings, latency_s=args.latency, time_alignment=args.time_alignment or "",
                               blank_cameras=args.blank_cameras, questions=args.questions, question_split=args.split)  # fmt: skip


def in_spec_order(results: list[Any], specs: list[Any]) -> list[Any]:
    """Episode results in the order of their specs (several environments finish out of order)."""
    order = {s.seed: i for i, s in enumerate(specs)}
    return sorted(results, key=lambda r: order[r.spec.seed])


def collect(results: Any, total: int, desc: str, quiet: bool) -> list[Any]:
    """Episode results as they finish, behind a progress bar with the running success count."""
    out: list[Any] = []
    bar = tqdm(results, total=total, desc=desc, disable=quiet, dynamic_ncols=True, file=sys.stderr)
    for result in bar:
        out.append(result)
        bar.set_postfix(success=f"{sum(r.success for r in out)}/{len(out)}")
    return out
