"""Serving several robots from one engine: who is due, whose inputs are usable, and the decode slack after.

Each robot has its own control period and phase. ``FleetSchedule.due`` names the robots whose tick time has
come; ``serve`` asks each for its frame (a robot whose inputs are missing or stale answers None and is
skipped for this tick, the others go on), runs one ``Engine.tick_many`` over the rest, and leaves the
decode policy the time until the earliest next tick of any robot, so no robot's deadline is overrun by
text. Nothing here knows about ROS.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .engine import Engine
from .types import FrameInput, TickResult


@dataclass
class RobotClock:
    period_s: float
    phase_s: float = 0.0
    next_s: float = 0.0  # the robot's next tick time (on the caller's clock)

    def __post_init__(self) -> None:
        if not self.period_s > 0 or not math.isfinite(self.period_s):
            raise ValueError(f"a robot's control period must be a positive number of seconds, got {self.period_s}")


@dataclass
class FleetTick:
    results: dict[str, TickResult] = field(default_factory=dict)  # robots served
    skipped: dict[str, str] = field(default_factory=dict)  # robot → why it got no chunk this tick
    next_deadline_s: float = math.inf  # the earliest next tick of any robot


class FleetSchedule:
    """Tick times of several robots, each ``phase_s + n · period_s`` from ``start_s``."""

    def __init__(self, periods: Mapping[str, float], phases: Mapping[str, float] | None = None, start_s: float = 0.0):
        if not periods:
            raise ValueError("a fleet schedule needs at least one robot")
        phases = phases or {}
        self.clocks = {n: RobotClock(p, phases.get(n, 0.0), start_s + phases.get(n, 0.0)) for n, p in periods.items()}

    def due(self, now_s: float) -> list[str]:
        return [n for n, c in self.clocks.items() if c.next_s <= now_s]

    def served(self, name: str, now_s: float) -> None:
        """The robot's tick at or before ``now_s`` is done (or skipped): its next one is the first after now;
        ticks missed while the engine was busy are dropped, not run late back to back."""
        clock = self.clocks[name]
        missed = math.floor((now_s - clock.next_s) / clock.period_s) + 1
        clock.next_s += max(1, missed) * clock.period_s

    def next_deadline(self) -> float:
        return min(c.next_s for c in self.clocks.values())


FrameSource = Callable[[str], "FrameInput | str"]  # a robot's frame now, or why it has none (missing, stale)


def serve(engine: Engine, schedule: FleetSchedule, frame_of: FrameSource, now_s: float) -> FleetTick:
    """One tick of every due robot: frames gathered, the unusable ones skipped, one batched engine tick."""
    out = FleetTick()
    frames: dict[str, FrameInput] = {}
    for name in schedule.due(now_s):
        got = frame_of(name)
        if isinstance(got, FrameInput):
            frames[name] = got
        else:
            out.skipped[name] = got
        schedule.served(name, now_s)
    if frames:
        out.results = engine.tick_many(frames)
    out.next_deadline_s = schedule.next_deadline()
    return out
