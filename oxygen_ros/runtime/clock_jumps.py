"""Jumps of the clock the node runs on (no ROS types here).

A replayed bag's `/clock` goes back by the bag's length at every loop; a paused simulator or a bag played
with a start offset moves it forward. Either way the times kept before the jump (the last chunk's tick, input
stamps, rate windows, a streamed chunk's start) belong to another timeline. `ClockJump` describes one jump;
`MonotonicCheck` finds jumps of a clock that nothing else watches (system time stepped by an administrator
or NTP) by comparing its advance with `time.monotonic` between two readings.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BACK_TOLERANCE_S", "ClockJump", "FORWARD_JUMP_S", "MonotonicCheck"]

# A step of the clock this far ahead of the time that passed is a jump forward: more than any /clock
# publisher's period (a bag player's default is 40 to 100 Hz), and more than the staleness and silence
# thresholds that a jump would otherwise trip.
FORWARD_JUMP_S = 1.0
# The monotonic check: the clock falling this far behind the time that passed is a jump back (readings of
# the two clocks a few microseconds apart never differ this much).
BACK_TOLERANCE_S = 0.01
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
    """Compares successive readings of a clock with `time.monotonic` readings taken with them."""

    def __init__(self, forward_s: float = FORWARD_JUMP_S, back_s: float = BACK_TOLERANCE_S) -> None:
        self.forward_ns = int(forward_s * _NS)
        self.back_ns = int(back_s * _NS)
        self._last: tuple[int, int] | None = None  # (clock, monotonic) at the previous reading

    def restart(self) -> None:
        """Forget the previous reading (the clock was replaced, or another watcher reported a jump)."""
        self._last = None

    def check(self, clock_ns: int, monotonic_ns: int) -> ClockJump | None:
        """The jump between the previous reading and this one, or None."""
        last, self._last = self._last, (clock_ns, monotonic_ns)
        if last is None:
            return None
        gap = (clock_ns - last[0]) - (monotonic_ns - last[1])  # how much more the clock moved than time passed
        if gap < -self.back_ns or gap > self.forward_ns:
            return ClockJump(gap, clock_ns, "system clock against the monotonic clock")
        return None
