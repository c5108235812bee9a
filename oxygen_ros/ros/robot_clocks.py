"""Which robots of a several-robot node a control tick serves: each robot on its own clock (`FleetSchedule`).

The control timer fires at the fastest robot's rate; a tick serves the robots whose own tick time has come.
Robot k of n starts k/n of its own period late, rounded down to whole timer periods: a phase between two timer
ticks would only be served at the next one. So robots slower than the timer are spread over its ticks (a 10 Hz
robot and three at 5 Hz give batches of two and three rather than four and one), while robots at the fastest
rate all share every tick: their frames go through one batched engine tick, which is what serving a fleet
from one model gains (docs/benchmark.md); spreading them would need a faster timer and split that batch.
No rclpy here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from oxygen_ros.engine.fleet import FleetSchedule

__all__ = ["RobotClocks", "robot_phases"]


def robot_phases(periods: Mapping[str, float], tick_period_s: float) -> dict[str, float]:
    """Robot k of n at k/n of its own period, rounded down to a whole number of timer periods."""
    n = len(periods)
    ticks = {name: math.floor(k / n * p / tick_period_s + 1e-9) for k, (name, p) in enumerate(periods.items())}
    return {name: k * tick_period_s for name, k in ticks.items()}


class RobotClocks:
    """The robots' tick times, started at the first control tick (and again if the clock jumps back)."""

    def __init__(self, periods: Mapping[str, float]) -> None:
        self.periods = dict(periods)
        self.tick_period_s = min(self.periods.values())
        self.phases = robot_phases(self.periods, self.tick_period_s)
        self._schedule: FleetSchedule | None = None

    def due(self, now_s: float) -> list[str]:
        """The robots whose tick has come at the control tick ``now_s``, marked served. Half a timer period of
        slack: a tick time the timer fires just before (jitter) is not put off by a whole timer period."""
        at = now_s + self.tick_period_s / 2
        s = self._schedule
        if s is None or any(c.next_s > at + c.period_s for c in s.clocks.values()):  # first tick, or time went back
            s = self._schedule = FleetSchedule(self.periods, self.phases, start_s=now_s)
        names = s.due(at)
        for name in names:
            s.served(name, at)
        return names
