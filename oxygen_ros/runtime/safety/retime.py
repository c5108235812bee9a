"""Pure functions that hold a chunk's commands to the limits (no state: `guard.py` keeps that).

Every function returns the guarded values and the limit hits per joint (``Hits``: kind → int count per dim):
``range`` (clamped into the position range; ``range_far`` too when the command lay beyond it by more than
``RANGE_TOLERANCE`` of the joint's range: the one kind worth a warning), ``distance`` (a step shortened: too far from where the joint is,
or is due to be, when the command is due), ``speed`` (a trajectory re-timed, a streamed position step or a
velocity shortened), ``acceleration`` (a change of velocity shortened).
"""

from __future__ import annotations

import math

import numpy as np

from .scaling import cap_norm, scale_step

__all__ = ["KINDS", "RANGE_TOLERANCE", "Hits", "count_clamps", "far_clamps", "blend_weights", "guard_positions", "guard_velocities", "guard_twist", "merge_hits"]

Hits = dict[str, np.ndarray]
KINDS = ("range", "range_far", "distance", "speed", "acceleration")
RANGE_TOLERANCE = 0.05  # of a joint's range: a clamp by more is no rounding of a command at the range's end
_EPS = 1e-9


def _change_bound(max_acceleration: float, dt_s: float) -> float:
    """The largest change of a velocity in ``dt_s`` (no limit: inf, also for a zero dt)."""
    return math.inf if not math.isfinite(max_acceleration) else max_acceleration * dt_s


def empty_hits(n: int) -> Hits:
    return {k: np.zeros(n, dtype=np.int64) for k in KINDS}


def merge_hits(total: Hits, more: Hits) -> Hits:
    for k, v in more.items():
        total[k] = total.get(k, np.zeros_like(v)) + v
    return total


def far_clamps(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Per joint, the clamp beyond which it counts as ``range_far``: ``RANGE_TOLERANCE`` of its range (inf: none)."""
    span = np.where(np.isfinite(upper - lower), upper - lower, math.inf)
    return RANGE_TOLERANCE * span


def count_clamps(hits: Hits, commanded: np.ndarray, clamped: np.ndarray, far: np.ndarray) -> None:
    """Count ``range`` (any clamp) and ``range_far`` (a clamp by more than ``far``, `far_clamps`) per joint, in
    place."""
    moved = np.abs(np.asarray(commanded, dtype=np.float64) - clamped)
    moved = moved.reshape(-1, moved.shape[-1])  # one command or several rows: counts per joint
    hits["range"] += np.count_nonzero(moved > 0, axis=0)
    hits["range_far"] += np.count_nonzero(moved > far, axis=0)


def blend_weights(times_s: np.ndarray, from_s: float, blend_s: float) -> np.ndarray:
    """0 → 1 over ``blend_s`` after ``from_s``: how much of the policy's command a point takes (the rest is the
    measured position it resumes from)."""
    if blend_s <= 0:
        return np.ones(len(times_s))
    return np.clip((np.asarray(times_s, dtype=np.float64) - from_s) / blend_s, 0.0, 1.0)


def guard_positions(
    times_s: np.ndarray, positions: np.ndarray, *, start_s: float, reference: np.ndarray | None,
    max_velocity: np.ndarray, max_distance: np.ndarray, lower: np.ndarray, upper: np.ndarray,
    end_s: float | None = None, measured: np.ndarray | None = None, max_acceleration: float = math.inf,
    from_rest: bool = False,
) -> tuple[np.ndarray, np.ndarray, Hits]:  # fmt: skip
    """Position points (times from the trajectory's start, strictly increasing, all after ``start_s``: the
    instant the controller has the joints at ``reference``) held to the limits: clamped into [lower, upper]; then
    re-timed so that no joint moves faster than ``max_velocity`` (a segment takes at least its nominal time).
    Every point lies within ``max_distance`` of ``measured`` (default: ``reference``): a point farther is moved
    toward it along the line from there (LeRobot's ``max_relative_target`` for each point, measured
    when the trajectory is sent: a chunk lasts a fraction of a second).
    Points the re-timing pushes past ``end_s`` (default: the last nominal time) are cut; the first point is always
    kept. Without a reference (nothing measured or sent yet) the first point is only clamped.
    Returns (times, positions, hits)."""
    times = np.asarray(times_s, dtype=np.float64)
    pos = np.asarray(positions, dtype=np.float64)
    n_joints = pos.shape[1]
    hits = empty_hits(n_joints)
    clamped = np.clip(pos, lower, upper)
    count_clamps(hits, pos, clamped, far_clamps(lower, upper))
    end = float(times[-1]) if end_s is None else end_s
    out_t: list[float] = []
    out_p: list[np.ndarray] = []
    prev_p = None if reference is None else np.asarray(reference, dtype=np.float64)
    # Every point within max_distance of the measured joints (else of the reference: where the path starts).
    origin = prev_p if measured is None else np.asarray(measured, dtype=np.float64)
    prev_t_nominal, prev_t = start_s, start_s
    for t_nominal, target in zip(times, clamped):
        slow = binding = None
        if prev_p is None:
            point, t = target.copy(), float(t_nominal)
        else:
            # The point toward the target from where the trajectory is, kept within reach of the measured joints.
            point, binding = scale_step(origin, target, max_distance)
            seg = np.abs(point - prev_p)
            if not out_t and measured is not None:
                # The first point also from the joints as measured: a controller that starts its path from the
                # measured state (ros2_controllers' joint trajectory controller) must not move them faster.
                seg = np.maximum(seg, np.abs(point - origin))
            with np.errstate(divide="ignore", invalid="ignore"):
                need_each = np.where(seg > 0, seg / max_velocity, 0.0)
            need = float(np.max(need_each)) if need_each.size else 0.0
            nominal = float(t_nominal) - prev_t_nominal
            if need > nominal * (1 + _EPS):
                slow = need_each >= need * (1 - 1e-12)
            t = prev_t + max(nominal, need)
        if out_t and t > end + _EPS and not math.isfinite(max_acceleration):
            break  # re-timed past the chunk's end: cut (the next chunk takes over from here)
        if binding is not None:
            hits["distance"] += binding
        if slow is not None:
            hits["speed"] += slow
        out_t.append(t)
        out_p.append(point)
        prev_p, prev_t, prev_t_nominal = point, t, float(t_nominal)
    out_times, out_points = np.asarray(out_t), np.stack(out_p)
    if math.isfinite(max_acceleration) and reference is not None:
        out_times, stretched = limit_accelerations(out_times, out_points, start_s, np.asarray(reference, dtype=np.float64),
                                                   max_acceleration, from_rest)  # fmt: skip
        hits["acceleration"] += stretched
        kept = np.concatenate([[True], out_times[1:] <= end + _EPS])  # cut what now ends past the chunk
        out_times, out_points = out_times[kept], out_points[kept]
    return out_times, out_points, hits


def limit_accelerations(times: np.ndarray, positions: np.ndarray, start_s: float, reference: np.ndarray,
                        max_acceleration: float, from_rest: bool, rounds: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Re-time a path (``reference`` at ``start_s``, then the points) so that no joint's velocity changes by more
    than ``max_acceleration`` × the segment's duration from one segment to the next (``from_rest``: the first from
    zero): the faster of two neighbouring segments is stretched until they agree. Returns (times, joints whose
    segments were stretched)."""
    path = np.vstack([reference, positions])
    steps = np.diff(path, axis=0)
    dts = np.diff(np.concatenate([[start_s], times]))
    stretched = np.zeros(path.shape[1], dtype=bool)
    for _ in range(rounds):
        changed = False
        v = steps / dts[:, None]
        prev = np.vstack([np.zeros((1, v.shape[1])) if from_rest else v[:1], v[:-1]])
        for i in range(len(dts)):
            excess = np.abs(v[i] - prev[i]) - max_acceleration * dts[i]
            if np.all(excess <= 1e-9):
                continue
            j = int(np.argmax(excess))
            # the faster segment slows: its speed brought to what the other one's allows
            if i > 0 and np.abs(prev[i][j]) > np.abs(v[i][j]):
                k, allowed = i - 1, np.abs(v[i][j]) + max_acceleration * dts[i]
            else:
                k, allowed = i, np.abs(prev[i][j]) + max_acceleration * dts[i]
            speed = np.abs(steps[k][j]) / dts[k]
            if speed > allowed > 0:
                dts[k] *= speed / allowed
                stretched[j] = changed = True
            elif allowed <= 0:
                dts[k] *= 2.0
                stretched[j] = changed = True
            v = steps / dts[:, None]
            prev = np.vstack([np.zeros((1, v.shape[1])) if from_rest else v[:1], v[:-1]])
        if not changed:
            break
    return start_s + np.cumsum(dts), stretched


def guard_velocities(
    velocities: np.ndarray, dt_s: np.ndarray | float, *, previous: np.ndarray, max_velocity: np.ndarray,
    max_acceleration: float,
) -> tuple[np.ndarray, Hits]:  # fmt: skip
    """Velocity rows in order, each ``dt_s`` after the one before (the first after ``previous``, the velocity
    commanded before): each capped to ``max_velocity`` by one factor for the row, then its change from the row
    before shortened along its direction to ``max_acceleration · dt`` (per joint). Returns (rows, hits)."""
    rows = np.asarray(velocities, dtype=np.float64)
    n = rows.shape[1]
    hits = empty_hits(n)
    dts = np.broadcast_to(np.asarray(dt_s, dtype=np.float64), (rows.shape[0],))
    out = np.empty_like(rows)
    prev = np.asarray(previous, dtype=np.float64)
    for i, row in enumerate(rows):
        v, binding = scale_step(np.zeros(n), row, max_velocity)
        hits["speed"] += binding
        v, binding = scale_step(prev, v, np.full(n, _change_bound(max_acceleration, dts[i])))
        hits["acceleration"] += binding
        out[i] = prev = v
    return out, hits


def guard_twist(
    twist: np.ndarray, dt_s: float, *, previous: np.ndarray, max_linear: float, max_angular: float,
    max_acceleration: float,
) -> tuple[np.ndarray, Hits]:  # fmt: skip
    """One twist (linear xyz, angular xyz): each part's norm capped to its speed, then each part's change from
    ``previous`` capped to ``max_acceleration · dt`` (norm), directions kept. Hits are per component."""
    t = np.asarray(twist, dtype=np.float64)
    prev = np.asarray(previous, dtype=np.float64)
    hits = empty_hits(6)
    out = np.empty(6)
    for part, cap in ((slice(0, 3), max_linear), (slice(3, 6), max_angular)):
        v, hit = cap_norm(t[part], cap)
        hits["speed"][part] += hit
        change, hit = cap_norm(v - prev[part], _change_bound(max_acceleration, dt_s))
        hits["acceleration"][part] += hit
        out[part] = prev[part] + change
    return out, hits
