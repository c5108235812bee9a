"""Which actions of a chunk are sent, and when each is due (no ROS types here).

An observation taken at ``stamp`` is answered ``latency`` later; the chunk's action i belongs to
``stamp + (i + 1)·step``. Three ways to hand a chunk to a trajectory follower (ros2_control's JTC semantics:
stamp 0 = start on arrival, a non-zero stamp times the points from that instant and skips those past):

* ``stamp`` (default) — the trajectory is stamped with the observation time and every point keeps its own
  time; the follower skips the points that are already past on arrival.
* ``drop`` — for consumers that cannot take a stamp in the past: the first ⌈latency / step⌉ actions are
  dropped and the rest start on arrival, each still at its own time (the first one is ≥ one step ahead).
* ``none`` — what a naive chunk executor does: every action from the first, starting on arrival, so the
  arm replays actions meant for the past.

Each way sends the actions that cover ``n_action_steps`` steps of execution after arrival: ``none`` the
first n, ``drop`` n after the dropped ones, ``stamp`` up to index ⌈latency / step⌉ + n.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .trajectory import JointLimits, TimedTrajectory, trajectory_points

TIME_ALIGNMENTS = ("stamp", "drop", "none")
REPLAN = ("tick", "n_action_steps")


def delay_steps(latency_s: float, step_period_s: float) -> int:
    """⌈latency / step⌉: how many of a chunk's actions are due before it arrives (0 for no latency)."""
    if step_period_s <= 0:
        raise ValueError(f"step period must be > 0, got {step_period_s}")
    # A hair below an exact multiple counts as the multiple (clock jitter must not add a whole step).
    return max(0, math.ceil(latency_s / step_period_s - 1e-6))


@dataclass(frozen=True)
class ChunkTiming:
    """How to send one chunk: rows ``first..last-1``, stamped ``stamp_ns`` (0 = on arrival), row i at
    ``times_s[i - first]`` after the stamp."""

    stamp_ns: int
    first: int
    last: int
    times_s: tuple[float, ...]

    @property
    def indices(self) -> range:
        return range(self.first, self.last)


def replan_due(
    now_s: float, last_chunk_s: float | None, replan: str, n_action_steps: int, step_period_s: float, slack_s: float = 0.0
) -> bool:
    """Whether a tick at ``now_s`` computes a new chunk: every tick (``tick``), or once ``n_action_steps``
    steps have passed since the tick of the last chunk (``n_action_steps``; ``slack_s`` absorbs timer jitter).
    A last chunk later than now belongs to a timeline the clock jumped back from: replan."""
    if replan not in REPLAN:
        raise ValueError(f"replan must be one of {list(REPLAN)}, got {replan!r}")
    if replan == "tick" or last_chunk_s is None or now_s < last_chunk_s:
        return True
    return now_s >= last_chunk_s + n_action_steps * step_period_s - slack_s


class ChunkTooLate(ValueError):
    """Every action the chunk would send is already past: nothing to execute."""


def align_chunk(
    horizon: int,
    step_period_s: float,
    stamp_ns: int,
    latency_s: float,
    n_action_steps: int | None = None,
    mode: str = "stamp",
) -> ChunkTiming:
    """The timing of a chunk of ``horizon`` actions from an observation at ``stamp_ns``, sent ``latency_s``
    after it. ``n_action_steps`` None = up to the whole chunk. Raises ChunkTooLate when nothing is left."""
    if mode not in TIME_ALIGNMENTS:
        raise ValueError(f"time alignment must be one of {list(TIME_ALIGNMENTS)}, got {mode!r}")
    if horizon < 1:
        raise ValueError(f"a chunk needs at least one action, got horizon {horizon}")
    n = horizon if n_action_steps is None else n_action_steps
    if n < 1:
        raise ValueError(f"n_action_steps must be >= 1, got {n}")
    latency_s = max(0.0, latency_s)
    d = delay_steps(latency_s, step_period_s)
    if mode == "none":
        last = min(horizon, n)
        return ChunkTiming(0, 0, last, tuple((i + 1) * step_period_s for i in range(last)))
    last = min(horizon, d + n)
    if d >= last:
        raise ChunkTooLate(
            f"the chunk arrives {latency_s * 1e3:.0f} ms after its observation: all {last} actions it would send are past"
        )
    if mode == "drop":
        return ChunkTiming(0, d, last, tuple((i + 1) * step_period_s - latency_s for i in range(d, last)))
    return ChunkTiming(stamp_ns, 0, last, tuple((i + 1) * step_period_s for i in range(last)))


def aligned_trajectory(
    actions: np.ndarray,
    joint_names: Sequence[str],
    step_period_s: float,
    limits: JointLimits,
    stamp_ns: int,
    latency_s: float,
    n_action_steps: int | None = None,
    mode: str = "stamp",
) -> tuple[TimedTrajectory, int]:
    """The trajectory of a (horizon, action_dim) chunk sent ``latency_s`` after its observation at
    ``stamp_ns`` (see `align_chunk`); returns it and how many positions were clamped. Raises ChunkTooLate
    when nothing is left to execute, ValueError for chunks that cannot be commanded."""
    values = np.asarray(actions)
    if values.ndim != 2 or values.shape[0] == 0:
        raise ValueError(f"actions must be a non-empty (horizon, action_dim) array, got shape {values.shape}")
    timing = align_chunk(values.shape[0], step_period_s, stamp_ns, latency_s, n_action_steps, mode)
    trajectory, clamped = trajectory_points(values[timing.first : timing.last], joint_names, step_period_s, limits)
    return dataclasses.replace(trajectory, times_s=np.asarray(timing.times_s), start_time_ns=timing.stamp_ns), clamped
