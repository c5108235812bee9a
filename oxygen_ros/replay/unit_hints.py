"""Whether a dimension's recorded values and the policy's commands look like one quantity in two units (no ROS).

A recording made in other units than the policy's commands (a gripper sent as 0..1 where the policy commands
its joint's rad, degrees against rad, mm against m) shows as a large error with nothing saying why. The
ranges of both sides (1st to 99th percentile, so a single outlier does not decide) say it: spans whose ratio
is close to a unit's factor, or one side inside 0..1 while the other reaches well past it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# factor: (what is the larger side, what is the smaller): the larger span over the smaller one
UNIT_FACTORS = ((180.0 / math.pi, "degrees", "rad"), (1000.0, "mm", "m"))
FACTOR_TOLERANCE = 1.5  # a span ratio within this factor of a unit's factor counts as that unit
UNIT_RANGE = (-0.05, 1.05)  # a side inside this, spanning at least MIN_UNIT_SPAN, looks normalized to 0..1
MIN_UNIT_SPAN = 0.5
PAST_UNIT = 0.15  # the other side reaches this far beyond 0..1 (and spans this much more) to count as other units
MIN_SPAN = 1e-6  # a side that does not move says nothing about its units


@dataclass(frozen=True)
class Ranges:
    recorded: tuple[float, float]
    policy: tuple[float, float]

    @property
    def ratio(self) -> float:
        """The recorded span over the policy's (inf where the policy does not move)."""
        policy = self.policy[1] - self.policy[0]
        return (self.recorded[1] - self.recorded[0]) / policy if policy > MIN_SPAN else math.inf


def value_ranges(recorded: np.ndarray, policy: np.ndarray) -> Ranges | None:
    """The 1st..99th percentile range of each side's finite values; None where either side has none."""
    rec, pol = recorded[np.isfinite(recorded)], policy[np.isfinite(policy)]
    if not len(rec) or not len(pol):
        return None
    lo_r, hi_r = np.percentile(rec, [1, 99])
    lo_p, hi_p = np.percentile(pol, [1, 99])
    return Ranges((float(lo_r), float(hi_r)), (float(lo_p), float(hi_p)))


def unit_hint(ranges: Ranges | None) -> str | None:
    """A sentence naming the units the two ranges look like, or None where they look like one unit."""
    if ranges is None:
        return None
    rec_span = ranges.recorded[1] - ranges.recorded[0]
    pol_span = ranges.policy[1] - ranges.policy[0]
    if rec_span <= MIN_SPAN or pol_span <= MIN_SPAN:
        return None
    ratio = rec_span / pol_span
    for factor, large, small in UNIT_FACTORS:
        for r, (rec_unit, pol_unit) in ((ratio, (large, small)), (1 / ratio, (small, large))):
            if factor / FACTOR_TOLERANCE <= r <= factor * FACTOR_TOLERANCE:
                return (f"recorded {_span(ranges.recorded)} against the policy's {_span(ranges.policy)}, "
                        f"{ratio:.3g}x: {rec_unit} recorded where the policy commands {pol_unit}?")  # fmt: skip
    for side, other, name in ((ranges.recorded, ranges.policy, "recording"), (ranges.policy, ranges.recorded, "policy")):
        if _in_unit_range(side) and _past_unit_range(other, side):
            other_name = "policy's commands" if name == "recording" else "recording"
            return (f"recorded {_span(ranges.recorded)} against the policy's {_span(ranges.policy)}: the {name} "
                    f"looks normalized to 0..1 where the {other_name} use the joint's units (rad or m)?")  # fmt: skip
    return None


def _in_unit_range(r: tuple[float, float]) -> bool:
    return UNIT_RANGE[0] <= r[0] and r[1] <= UNIT_RANGE[1] and r[1] - r[0] >= MIN_UNIT_SPAN


def _past_unit_range(r: tuple[float, float], unit: tuple[float, float]) -> bool:
    beyond = max(-r[0], r[1] - 1.0)
    return beyond >= PAST_UNIT and (r[1] - r[0]) - (unit[1] - unit[0]) >= PAST_UNIT


def _span(r: tuple[float, float]) -> str:
    return f"{r[0]:.3g} … {r[1]:.3g}"
