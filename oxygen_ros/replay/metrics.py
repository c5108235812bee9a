"""Errors of predicted commands against a reference, per dimension and per horizon step, and the pass/fail
thresholds of ``oxygen-replay eval`` (no ROS).

Each tick adds a [horizon, dims] prediction, the reference at the same instants (NaN: nothing recorded) and
which steps would be executed. ``summary`` gives per dimension MAE, RMSE and max over every compared step and
over the executed ones, the tick where it is worst, per horizon step the MAE, and for grippers how often
predicted and recorded agree on open or closed (split at the middle of the recorded range), and both sides'
ranges with a hint where they look like one quantity in two units (`unit_hints`).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .unit_hints import unit_hint, value_ranges

SCOPES = ("executed", "horizon")


@dataclass
class ErrorTable:
    dims: list[str]
    grippers: list[bool]
    ticks: list[int] = field(default_factory=list)
    times_s: list[float] = field(default_factory=list)
    targets_s: list[np.ndarray] = field(default_factory=list)  # [H] instants of each step (bag time from its start)
    predicted: list[np.ndarray] = field(default_factory=list)  # [H, D]
    reference: list[np.ndarray] = field(default_factory=list)  # [H, D]
    executed: list[np.ndarray] = field(default_factory=list)  # [H] bool
    episodes: list[int] = field(default_factory=list)  # each tick's episode

    def add(self, tick: int, time_s: float, targets_s: np.ndarray, predicted: np.ndarray, reference: np.ndarray,
            executed: np.ndarray, episode: int = 0) -> None:  # fmt: skip
        self.episodes.append(episode)
        self.ticks.append(tick)
        self.times_s.append(time_s)
        self.targets_s.append(np.asarray(targets_s, dtype=np.float64))
        self.predicted.append(np.asarray(predicted, dtype=np.float64))
        self.reference.append(np.asarray(reference, dtype=np.float64))
        self.executed.append(np.asarray(executed, dtype=bool))

    @property
    def horizon(self) -> int:
        return max((len(p) for p in self.predicted), default=0)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(errors [T, H, D] NaN where not compared, executed [T, H], predicted [T, H, D]) padded to the longest chunk."""
        t, h, d = len(self.predicted), self.horizon, len(self.dims)
        err, pred = np.full((t, h, d), np.nan), np.full((t, h, d), np.nan)
        exe = np.zeros((t, h), dtype=bool)
        for i, (p, r, e) in enumerate(zip(self.predicted, self.reference, self.executed)):
            err[i, : len(p)] = p - r
            pred[i, : len(p)] = p
            exe[i, : len(e)] = e
        return err, exe, pred

    def per_tick(self, scope: str = "executed") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per tick and dim (MAE, RMSE, max |error|) over the scope's steps [T, D] (NaN: nothing compared)."""
        err, exe, _ = self.arrays()
        if scope == "executed":
            err = np.where(exe[:, :, None], err, np.nan)
        return _stats(np.abs(err), axis=1)

    def of_episode(self, episode: int) -> "ErrorTable":
        """The ticks of one episode, as a table of their own."""
        keep = [i for i, e in enumerate(self.episodes) if e == episode]
        part = ErrorTable(self.dims, self.grippers)
        for name in ("ticks", "times_s", "targets_s", "predicted", "reference", "executed", "episodes"):
            setattr(part, name, [getattr(self, name)[i] for i in keep])
        return part

    def summary(self, episode: int | None = None) -> dict:
        """Per dimension errors over every tick (or one episode's)."""
        if episode is not None:
            return self.of_episode(episode).summary()
        err, exe, pred = self.arrays()
        ref = pred - err
        out: dict = {"horizon": self.horizon, "dims": {}}
        if not self.ticks:
            return out
        executed_err = np.where(exe[:, :, None], err, np.nan)
        all_mae, all_rmse, all_max = _stats(np.abs(err).reshape(-1, len(self.dims)), axis=0)
        ex_mae, ex_rmse, ex_max = _stats(np.abs(executed_err).reshape(-1, len(self.dims)), axis=0)
        tick_mae = {scope: self.per_tick(scope)[0] for scope in SCOPES}
        step_mae = np.nanmean(np.abs(err), axis=0) if np.isfinite(err).any() else np.full((self.horizon, len(self.dims)), np.nan)
        for d, name in enumerate(self.dims):
            row: dict = {
                "mae": _num(all_mae[d]), "rmse": _num(all_rmse[d]), "max": _num(all_max[d]),
                "compared": int(np.isfinite(err[:, :, d]).sum()),
                "executed": {"mae": _num(ex_mae[d]), "rmse": _num(ex_rmse[d]), "max": _num(ex_max[d]),
                             "compared": int(np.isfinite(executed_err[:, :, d]).sum())},
                "worst_tick": {scope: self._worst(tick_mae[scope][:, d]) for scope in SCOPES},
                "mae_by_step": [_num(v, 4) for v in step_mae[:, d]],
            }  # fmt: skip
            if self.grippers[d]:
                row["gripper"] = _agreement(pred[:, :, d], ref[:, :, d], exe)
            # the executed steps (what a controller receives) against what was recorded at the same instants
            compared_exe = exe & np.isfinite(ref[:, :, d])
            ranges = value_ranges(ref[:, :, d][compared_exe], pred[:, :, d][compared_exe])
            if ranges is not None:  # both sides' ranges, and whether they look like two units of one quantity
                row["ranges"] = {"recorded": [_num(v) for v in ranges.recorded], "policy": [_num(v) for v in ranges.policy]}
                row["unit_hint"] = unit_hint(ranges)
            out["dims"][name] = row
        out["mae_by_step"] = [_num(v, 4) for v in _nanmean_rows(step_mae)]
        out["executed_steps"] = int(exe.sum(axis=1).max())
        return out

    def _worst(self, values: np.ndarray) -> dict | None:
        if not np.isfinite(values).any():
            return None
        i = int(np.nanargmax(values))
        return {"tick": self.ticks[i], "episode": self.episodes[i], "time_s": round(self.times_s[i], 3), "mae": _num(values[i])}


def _stats(abs_err: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    seen = np.isfinite(abs_err).any(axis=axis)
    safe = np.where(np.isfinite(abs_err), abs_err, 0.0)
    n = np.isfinite(abs_err).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        mae = np.where(seen, safe.sum(axis=axis) / np.maximum(n, 1), np.nan)
        rmse = np.where(seen, np.sqrt((safe**2).sum(axis=axis) / np.maximum(n, 1)), np.nan)
    worst = np.where(seen, safe.max(axis=axis), np.nan)
    return mae, rmse, worst


def _nanmean_rows(table: np.ndarray) -> np.ndarray:
    seen = np.isfinite(table)
    return np.where(seen.any(axis=1), np.where(seen, table, 0).sum(axis=1) / np.maximum(seen.sum(axis=1), 1), np.nan)


def _agreement(pred: np.ndarray, ref: np.ndarray, executed: np.ndarray) -> dict:
    """Open/closed agreement, split at the middle of the recorded range (robot units)."""
    seen = np.isfinite(ref) & np.isfinite(pred)
    if not seen.any() or np.ptp(ref[seen]) <= 1e-9:
        return {"threshold": None, "agreement": None, "executed_agreement": None}
    threshold = float((ref[seen].min() + ref[seen].max()) / 2)
    same = (pred > threshold) == (ref > threshold)
    ex = seen & executed
    return {"threshold": _num(threshold), "agreement": _num(same[seen].mean(), 4),
            "executed_agreement": _num(same[ex].mean(), 4) if ex.any() else None}  # fmt: skip


def _num(value: float, digits: int = 6) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else round(float(value), digits)


# ------------------------------------------------------------------------------------------ thresholds
def parse_limits(specs: Sequence[str], flag: str) -> dict[str, float]:
    """``0.05`` (every dimension) or ``NAME=0.05`` (a dimension, an output's name or a pattern such as
    ``*gripper``), repeatable; the key ``*`` holds the global one. ValueError names the bad spec."""
    limits: dict[str, float] = {}
    for spec in specs:
        name, sep, value = spec.rpartition("=")
        key = name.strip() if sep else "*"
        try:
            limit = float(value)
        except ValueError:
            raise ValueError(f"{flag} {spec!r}: expected a number or NAME=NUMBER") from None
        if not (math.isfinite(limit) and limit >= 0) or not key:
            raise ValueError(f"{flag} {spec!r}: the limit must be a number >= 0 after a non-empty name")
        limits[key] = limit
    return limits


def limit_for(dim: str, output: str, limits: Mapping[str, float]) -> float | None:
    """The most specific limit of a dimension: its name, its output's name, a pattern, the global one."""
    for key in (dim, output):
        if key in limits:
            return limits[key]
    patterns = [k for k in limits if k != "*" and any(c in k for c in "*?[") and fnmatch.fnmatchcase(dim, k)]
    if patterns:
        return limits[max(patterns, key=len)]
    return limits.get("*")


@dataclass(frozen=True)
class Failure:
    dim: str
    metric: str
    value: float
    limit: float
    worst: dict | None
    unit_hint: str | None = None

    @property
    def ratio(self) -> float:
        return self.value / self.limit if self.limit > 0 else math.inf

    def line(self, scope: str) -> str:
        where = (f"; worst tick {self.worst['tick']} of episode {self.worst.get('episode', 0)} at {self.worst['time_s']:.2f} s "
                 f"(MAE {self.worst['mae']:.4g})" if self.worst else "")  # fmt: skip
        steps = "executed steps" if scope == "executed" else "whole horizon"
        units = f"; units: {self.unit_hint}" if self.unit_hint else ""
        return f"{self.dim}: {steps} {self.metric.upper()} {self.value:.4g} > {self.limit:g}{where}{units}"


def check_limits(summary: Mapping, outputs_of: Mapping[str, str], max_mae: Mapping[str, float],
                 max_rmse: Mapping[str, float], scope: str = "executed") -> list[Failure]:  # fmt: skip
    """Every dimension over its limit, worst (largest value / limit) first."""
    failures = []
    for dim, row in summary["dims"].items():
        stats = row["executed"] if scope == "executed" else row
        for metric, limits in (("mae", max_mae), ("rmse", max_rmse)):
            limit = limit_for(dim, outputs_of.get(dim, ""), limits)
            value = stats[metric]
            if limit is not None and value is not None and value > limit:
                failures.append(Failure(dim, metric, value, limit, row["worst_tick"][scope], row.get("unit_hint")))
    return sorted(failures, key=lambda f: -f.ratio)


def merged(tables: Sequence[ErrorTable]) -> tuple[ErrorTable, list[tuple[int, int]]]:
    """Several bags' tables (the same dimensions) as one, for figures over all of them; its episodes are
    numbered on, and the second value gives, per merged episode, (the table's index, its own episode)."""
    out = ErrorTable(tables[0].dims, tables[0].grippers)
    origin: list[tuple[int, int]] = []
    for t, table in enumerate(tables):
        renumber: dict[int, int] = {}
        for e in sorted(set(table.episodes)):
            renumber[e] = len(origin)
            origin.append((t, e))
        for name in ("ticks", "times_s", "targets_s", "predicted", "reference", "executed"):
            getattr(out, name).extend(getattr(table, name))
        out.episodes.extend(renumber[e] for e in table.episodes)
    return out, origin


@dataclass(frozen=True)
class Verdict:
    """One evaluation judged: the dimensions over their limits (worst first), what was lost of a damaged bag
    ("" for an intact one) and the exit code (3 damaged, else 1 over a limit, else 0)."""

    failures: list[Failure]
    damage: str
    exit_code: int


def judge(summary: Mapping, max_mae: Mapping[str, float], max_rmse: Mapping[str, float], scope: str) -> Verdict:
    """The thresholds applied to an evaluation's summary, and its damage."""
    outputs_of = {d: o for o, ds in summary.get("outputs", {}).items() for d in ds}
    failures = check_limits(summary, outputs_of, max_mae, max_rmse, scope)
    damage = damage_note(summary["damage"]) if "damage" in summary else ""
    return Verdict(failures, damage, 3 if damage else 1 if failures else 0)


def damage_note(damage: Mapping) -> str:
    """What was lost of a bag judged anyway ("" for an intact one)."""
    parts = (["truncated: read up to the damage"] if damage["truncated"] else []) + (
        [f"{damage['undecodable_messages']} messages that do not decode"] if damage["undecodable_messages"] else [])
    return "; ".join(parts)


def mean_executed_mae(summary: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """The mean over dimensions of a summary's executed-steps MAE (6 places), and the dimension where it is worst."""
    known = {d: r["executed"]["mae"] for d, r in summary["dims"].items() if r["executed"]["mae"] is not None}
    if not known:
        return None, None
    return round(sum(known.values()) / len(known), 6), max(known, key=lambda d: known[d])
