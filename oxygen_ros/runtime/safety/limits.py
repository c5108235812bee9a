"""Limits in the robot's units, per output: what the guard (``guard.py``) holds every command to.

Per joint (by the output's joint names, after the output conversions, in the controller's units):

* ``max_velocity`` — the fastest the joint may be commanded to move (position outputs: a trajectory is
  re-timed and a streamed command's step from the previous one shortened; velocity outputs: the commanded
  velocity is capped), units/s;
* ``max_distance`` — how far a command may lie from the joint's measured position at the instant it is due
  (LeRobot's ``max_relative_target``), units; a gripper that must squeeze an object should have none;
* ``lower`` / ``upper`` — the position range (commands are clamped into it; a value far beyond it, more than
  ``out_of_range_margin`` of the range, is not a command at all: the robot holds).

Per output: ``max_acceleration`` for velocity commands and twists (units/s², linear and angular alike) where
the controller has no limit of its own; a twist's ``max_linear_speed`` and ``max_angular_speed`` (norms of its
linear and angular parts, in the twist's units). ``inf`` everywhere means no limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..outputs import OutputSpec
from .refusals import NON_FINITE, OUT_OF_RANGE, Refusal

__all__ = ["UNGUARDED", "OutputLimits", "limits_of_outputs", "limit_table_problems", "unguarded_lines"]

INF = math.inf
DEFAULT_OUT_OF_RANGE_MARGIN = 0.5
# Parameter overrides that turn every limit and the resume blend off (comparisons with and without the guard).
UNGUARDED = {"limit_joints": [], "limit_max_velocity": [], "limit_max_distance": [], "limit_lower": [], "limit_upper": [],
             "output_max_acceleration": [], "output_max_linear_speed": [], "output_max_angular_speed": [],
             "resume_blend_s": 0.0}  # fmt: skip


@dataclass(frozen=True)
class OutputLimits:
    output: str
    labels: tuple[str, ...]  # one per dim: the joint name, or "d<i>" / "linear.x" ... where there is none
    max_velocity: tuple[float, ...]
    max_distance: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    max_acceleration: float = INF
    max_linear_speed: float = INF
    max_angular_speed: float = INF
    out_of_range_margin: float = DEFAULT_OUT_OF_RANGE_MARGIN

    @classmethod
    def none(cls, spec: OutputSpec) -> "OutputLimits":
        n = len(spec.dims)
        return cls(spec.name, _labels(spec), (INF,) * n, (INF,) * n, (-INF,) * n, (INF,) * n)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (np.asarray(self.max_velocity), np.asarray(self.max_distance), np.asarray(self.lower), np.asarray(self.upper))

    @property
    def any(self) -> bool:
        """Whether anything at all is limited (an output without limits passes its commands unchanged)."""
        return bool(
            any(math.isfinite(x) for x in (*self.max_velocity, *self.max_distance, *self.lower, *self.upper))
            or any(math.isfinite(x) for x in (self.max_acceleration, self.max_linear_speed, self.max_angular_speed))
        )

    def refusal(self, values: np.ndarray) -> Refusal | None:
        """Why these [..., dims] values are not a command at all, or None: non-finite values, or values beyond a
        position limit by more than the margin of the joint's range."""
        v = np.asarray(values, dtype=np.float64)
        bad = ~np.isfinite(v)
        if np.any(bad):
            joints = tuple(self.labels[j] for j in np.flatnonzero(bad.reshape(-1, v.shape[-1]).any(axis=0)))
            return Refusal(self.output, joints, NON_FINITE, f"output {self.output}: the model's actions contain NaN "
                           f"or infinite values ({', '.join(joints)})")  # fmt: skip
        lo, hi = np.asarray(self.lower), np.asarray(self.upper)
        span = np.where(np.isfinite(hi - lo), hi - lo, INF)
        slack = self.out_of_range_margin * span
        beyond = ((v < lo - slack) | (v > hi + slack)).reshape(-1, v.shape[-1]).any(axis=0)
        if not np.any(beyond):
            return None
        j = int(np.flatnonzero(beyond)[0])
        worst = float(v[..., j].min() if np.any(v[..., j] < lo[j] - slack[j]) else v[..., j].max())
        return Refusal(self.output, tuple(self.labels[i] for i in np.flatnonzero(beyond)), OUT_OF_RANGE,
                       f"output {self.output}: {self.labels[j]} commanded {worst:.4g}, beyond its range [{lo[j]:.4g}, "
                       f"{hi[j]:.4g}] by more than {self.out_of_range_margin:g} of the range")  # fmt: skip


def _labels(spec: OutputSpec) -> tuple[str, ...]:
    if spec.type == "twist":
        return ("linear.x", "linear.y", "linear.z", "angular.x", "angular.y", "angular.z")
    if len(spec.joints) == len(spec.dims):
        return tuple(spec.joints)
    return tuple(f"d{d}" for d in spec.dims)


def _per_entry(values: Sequence[float], i: int, empty: float) -> float:
    """An entry of a per-joint or per-output list; 0 (or a missing list) = no limit."""
    if i >= len(values) or not values[i]:
        return empty
    return float(values[i])


def limit_table_problems(v: Mapping[str, object], n_outputs: int) -> list[str]:
    """What is wrong with the limit parameters (each list empty or one entry per limit_joints / output)."""
    problems = []
    joints = list(v.get("limit_joints") or [])  # type: ignore[call-overload]
    if len(set(joints)) != len(joints) or any(not j for j in joints):
        problems.append(f"limit_joints must be unique and non-empty, got {joints}")
    for name in ("limit_max_velocity", "limit_max_distance", "limit_lower", "limit_upper"):
        values = list(v.get(name) or [])  # type: ignore[call-overload]
        if values and len(values) != len(joints):
            problems.append(f"{name} must be empty or have one entry per limit_joints entry ({len(joints)}), got {len(values)}")
        if name in ("limit_max_velocity", "limit_max_distance") and any(x < 0 for x in values):
            problems.append(f"{name} must be >= 0 (0 = no limit), got {values}")
    lower, upper = list(v.get("limit_lower") or []), list(v.get("limit_upper") or [])  # type: ignore[call-overload]
    if bool(lower) != bool(upper):
        problems.append("limit_lower and limit_upper must be given together")
    crossed = [j for j, lo, hi in zip(joints, lower, upper) if lo > hi]
    if crossed:
        problems.append(f"limit_lower > limit_upper for joints {crossed}")
    for name in ("output_max_acceleration", "output_max_linear_speed", "output_max_angular_speed"):
        values = list(v.get(name) or [])  # type: ignore[call-overload]
        if values and len(values) != n_outputs:
            problems.append(f"{name} must be empty or have one entry per output ({n_outputs}), got {len(values)}")
        if any(x < 0 for x in values):
            problems.append(f"{name} must be >= 0 (0 = no limit), got {values}")
    return problems


def limits_of_outputs(outputs: Sequence[OutputSpec], v: Mapping[str, object],
                      state_joints: Sequence[str] = (), state_lower: Sequence[float] = (),
                      state_upper: Sequence[float] = ()) -> dict[str, OutputLimits]:  # fmt: skip
    """Each output's limits from (validated) parameter values. A joint's position range comes from
    limit_lower/limit_upper (equal values = none), else from joint_limits_lower/upper of the state's joint of the
    same name (position outputs)."""
    joints = list(v.get("limit_joints") or [])  # type: ignore[call-overload]
    index = {name: i for i, name in enumerate(joints)}
    vel = list(v.get("limit_max_velocity") or [])  # type: ignore[call-overload]
    dist = list(v.get("limit_max_distance") or [])  # type: ignore[call-overload]
    low = list(v.get("limit_lower") or [])  # type: ignore[call-overload]
    up = list(v.get("limit_upper") or [])  # type: ignore[call-overload]
    state = {name: (state_lower[i], state_upper[i]) for i, name in enumerate(state_joints) if i < len(state_lower)}
    margin = float(v.get("limit_out_of_range_margin", DEFAULT_OUT_OF_RANGE_MARGIN))  # type: ignore[arg-type]
    out = {}
    for k, spec in enumerate(outputs):
        labels = _labels(spec)
        mv, md, lo, hi = [], [], [], []
        for label in labels:
            i = index.get(label)
            mv.append(INF if i is None else _per_entry(vel, i, INF))
            md.append(INF if i is None else _per_entry(dist, i, INF))
            rng = (low[i], up[i]) if i is not None and i < len(low) and low[i] < up[i] else None
            if rng is None and spec.interface == "position" and spec.type != "twist" and label in state:
                rng = state[label]
            lo.append(-INF if rng is None else float(rng[0]))
            hi.append(INF if rng is None else float(rng[1]))
        if spec.interface == "velocity" or spec.type == "twist":
            md = [INF] * len(labels)  # a velocity is no distance from the measured position
        out[spec.name] = OutputLimits(
            spec.name, labels, tuple(mv), tuple(md), tuple(lo), tuple(hi),
            _per_entry(list(v.get("output_max_acceleration") or []), k, INF),  # type: ignore[call-overload]
            _per_entry(list(v.get("output_max_linear_speed") or []), k, INF),  # type: ignore[call-overload]
            _per_entry(list(v.get("output_max_angular_speed") or []), k, INF),  # type: ignore[call-overload]
            margin,
        )  # fmt: skip
    return out


def unguarded_lines(outputs: Sequence[OutputSpec], limits: Mapping[str, OutputLimits]) -> list[str]:
    """What has no limit, one entry per output (empty: every output is guarded by something)."""
    lines = []
    for spec in outputs:
        lim = limits.get(spec.name) or OutputLimits.none(spec)
        if spec.type == "twist":
            if not (math.isfinite(lim.max_linear_speed) and math.isfinite(lim.max_angular_speed)):
                lines.append(f"{spec.name} (twist speed)")
            continue
        no_speed = [lab for lab, x in zip(lim.labels, lim.max_velocity) if not math.isfinite(x)]
        if no_speed:
            lines.append(f"{spec.name} ({'velocity' if spec.interface == 'velocity' else 'speed'} of {', '.join(no_speed)})")
    return lines
