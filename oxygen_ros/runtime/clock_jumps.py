"""Jumps of the clock the node runs on (no ROS types here).

A replayed bag's `/clock` goes back by the bag's length at every loop; a paused simulator or a bag played
with a start offset moves it forward. Either way the times kept before the jump (the last chunk's tick, input
stamps, rate windows, a streamed chunk's start) belong to another timeline. `ClockJump` describes one jump;
`MonotonicCheck` finds jumps of a clock that nothing else watches (system time stepped by an administrator
or NTP) by comparing its advance with `time.monotonic` between two readings, each bracketed so that a thread
preempted while reading cannot look like a jump.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

__all__ = ["BACK_TOLERANCE_S", "ClockJump", "FORWARD_JUMP_S", "MonotonicCheck"]

# A step of the clock this far ahead of the time that passed is a jump forward: more than any /clock
# publisher's period (a bag player's default is 40 to 100 Hz), and more than the staleness and silence
# thresholds that a jump would otherwise trip.
FORWARD_JUMP_S = 1.0
# The monotonic check: the clock falling this far behind the time that passed is a jump back, beyond the
# readings' own uncertainty (see `MonotonicCheck`).
BACK_TOLERANCE_S = 0.01
READ_TRIES = 3  # readings of the clock pair per check; the tightest is used
TIGHT_NS = 200_000  # a reading bracketed this tightly needs no further try (an unpreempted one takes a few µs)
# How fast a slew may move the clock against the monotonic clock: on Linux both are slewed alike (0), elsewhere
# NTP slews at most 500 ppm.
SLEW_PPM = 500.0
_NS = 1_000_000_000


@dataclass(frozen=True)
class ClockJump:
    """The clock moved by ``delta_ns`` (negative: back) to ``now_ns``; ``source`` says who noticed."""

    delta_ns: int
    now_ns: int
    source: str = "clock"
    clock_change: str = ""  # "ROS time activated" / "ROS time deactivated": the clock itself was replaced

    @property
    def back(self) -> bool:
        return self.delta_ns < 0 or bool(self.clock_change)

    def describe(self) -> str:
        """E.g. "clock jumped back 30.000 s (1030.000 s -> 1000.000 s, /clock)"."""
        if self.clock_change:
            return f"clock source changed ({self.clock_change}, now {self.now_ns / _NS:.3f} s)"
        before = (self.now_ns - self.delta_ns) / _NS
        way = "back" if self.delta_ns < 0 else "forward"
        return (f"clock jumped {way} {abs(self.delta_ns) / _NS:.3f} s ({before:.3f} s -> {self.now_ns / _NS:.3f} s, "
                f"{self.source})")


class MonotonicCheck:
    """Finds steps of a clock by how its offset from `time.monotonic` changes between readings.

    A reading brackets the clock between two monotonic readings, so a thread preempted while reading (a busy
    machine) widens the reading's uncertainty instead of looking like a step; the tightest of a few tries is
    kept. A step is reported only when the offset moved by more than the tolerance plus both readings'
    uncertainties. Slews (NTP, chrony) change the rate of CLOCK_REALTIME and CLOCK_MONOTONIC alike on Linux, so
    they move the offset not at all; `slew_ppm` allows for a platform where they differ.
    """

    def __init__(self, forward_s: float = FORWARD_JUMP_S, back_s: float = BACK_TOLERANCE_S,
                 monotonic_ns: Callable[[], int] = time.monotonic_ns, tries: int = READ_TRIES,
                 slew_ppm: float = SLEW_PPM) -> None:  # fmt: skip
        self.forward_ns = int(forward_s * _NS)
        self.back_ns = int(back_s * _NS)
        self.monotonic_ns = monotonic_ns
        self.tries = max(1, tries)
        self.slew = slew_ppm * 1e-6
        self._reference: _Offset | None = None  # the tightest recent reading, kept until a tighter one comes

    def restart(self) -> None:
        """Forget the previous readings (the clock was replaced, or another watcher reported a jump)."""
        self._reference = None

    def read(self, clock_ns: Callable[[], int]) -> ClockJump | None:
        """Read ``clock_ns`` against the monotonic clock: the step since the reference reading, or None."""
        best: _Offset | None = None
        for _ in range(self.tries):
            before = self.monotonic_ns()
            now = clock_ns()
            after = self.monotonic_ns()
            reading = _Offset(now - after, now - before, now, after)
            if best is None or reading.width < best.width:
                best = reading
            if best.width <= TIGHT_NS:
                break
        assert best is not None
        return self._compare(best)

    def _compare(self, new: _Offset) -> ClockJump | None:
        ref = self._reference
        if ref is None:
            self._reference = new
            return None
        # the reference's uncertainty grows with its age by what a slew could move one clock against the other
        drift = int(self.slew * max(0, new.monotonic_ns - ref.monotonic_ns))
        lowest, highest = new.low - ref.high - drift, new.high - ref.low + drift  # the offset's change lies within
        if highest < -self.back_ns or lowest > self.forward_ns:
            self._reference = new
            step = (new.low + new.high) // 2 - (ref.low + ref.high) // 2
            return ClockJump(step, new.clock_ns, "system clock against the monotonic clock")
        if new.width <= ref.width + 2 * drift:
            self._reference = new
        return None


@dataclass(frozen=True)
class _Offset:
    """One reading: the clock minus the monotonic clock lies in [low, high] (the monotonic readings before and
    after the clock's); ``clock_ns`` and ``monotonic_ns`` are the clock's and the later monotonic reading."""

    low: int
    high: int
    clock_ns: int
    monotonic_ns: int

    @property
    def width(self) -> int:
        return self.high - self.low
