"""A recording's episodes, as ``oxygen-replay eval`` judges them (no ROS).

A team's bag often holds several episodes one after another, with or without a pause between them. Where the
bag carries episode events (the simulator node's ``~/episode``: JSON with ``"event": "start"`` / ``"end"``),
they bound the episodes; otherwise a pause in the joint states longer than ``gap_s`` does. A chunk is only
compared with what was recorded inside its own episode, and the control ticks restart at each episode's start,
so the same episode gives the same figures wherever it lies in a bag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .eval_defaults import DEFAULT_GAP_S  # noqa: F401 - re-exported



@dataclass(frozen=True)
class Episode:
    index: int
    start_ns: int
    end_ns: int  # the last instant recorded in it (inclusive)
    source: str  # "topic" (episode events), "gap" (a pause in the joint states) or "bag" (one episode: the whole bag)
    reach_ns: int = 0  # commands are judged this far past end_ns (the last one sent is for a step later)

    def contains(self, times_ns: np.ndarray) -> np.ndarray:
        return (times_ns >= self.start_ns) & (times_ns <= self.end_ns + self.reach_ns)


def from_events(starts_ns: Sequence[int], ends_ns: Sequence[int], bag_end_ns: int) -> list[Episode]:
    """Episodes from the episode topic's events: each from its start to its end event (or the next start, or
    the bag's end where the end was not recorded)."""
    starts = sorted(starts_ns)
    ends = sorted(ends_ns)
    episodes = []
    for i, start in enumerate(starts):
        following = starts[i + 1] if i + 1 < len(starts) else bag_end_ns
        end = next((e for e in ends if start < e <= following), following)  # the previous one's end may be at start
        episodes.append(Episode(i, start, end, "topic"))
    return episodes


def from_gaps(times_ns: np.ndarray, gap_s: float, bag_start_ns: int, bag_end_ns: int, step_ns: int) -> list[Episode]:
    """Episodes from the recorded times of the joint states: a new one after every pause longer than gap_s
    (no pause: the whole bag, one episode); each judged up to a step past its last message."""
    times = np.sort(np.asarray(times_ns, dtype=np.int64))
    cuts = np.flatnonzero(np.diff(times) > round(gap_s * 1e9)) + 1 if len(times) else np.zeros(0, dtype=np.int64)
    if not len(cuts):
        return [Episode(0, bag_start_ns, bag_end_ns, "bag", step_ns)]
    bounds = zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(times)]]))
    return [Episode(i, int(times[a]), int(times[b - 1]), "gap", step_ns) for i, (a, b) in enumerate(bounds)]


def tick_instants(episodes: Sequence[Episode], period_ns: int, rate_hz: float) -> list[tuple[int, int]]:
    """(episode index, tick time) of every control tick: from each episode's start, every period, to its end."""
    out = []
    for ep in episodes:
        n = (ep.end_ns - ep.start_ns) // period_ns + 1
        out += [(ep.index, ep.start_ns + round(k * 1e9 / rate_hz)) for k in range(n)]
    return out
