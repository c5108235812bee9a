"""The guard's state: commanding, holding (something failed) or stopped (a latched stop input), and the
count of every limit hit per output and joint. Thread-safe: the model thread, the stream timer and the
stop input's callbacks all touch it.

RUN ──hold(reason)──▶ HOLD ──a chunk commanded again──▶ RUN
 ▲                      │
 └──stop(False)── STOP ◀┘──stop(True)  (from either; commanding resumes only once it is cleared, and then
                                       like after a hold: from the measured state)
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

__all__ = ["HoldState", "LimitCounter", "MeasuredJoints", "RUN", "HOLD", "STOP"]

RUN, HOLD, STOP = "RUN", "HOLD", "STOP"


class HoldState:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state = HOLD  # nothing commanded yet: the first chunk resumes from the measured state
        self.reason = "not commanded yet"
        self.stopped = False
        self.holds: Counter[str] = Counter()  # holds by the kind of their reason

    def hold(self, kind: str, reason: str) -> bool:
        """Enter HOLD (unless stopped); True when commanding was going on until now (the caller says why, once)."""
        with self._lock:
            if self.state != RUN:
                return False
            self.state, self.reason = HOLD, reason
            self.holds[kind] += 1
            return True

    def stop(self, latched: bool, reason: str = "the stop input is set") -> bool:
        """Latch or clear the stop; True when that changed it."""
        with self._lock:
            if latched == self.stopped:
                return False
            self.stopped = latched
            if latched:
                self.state, self.reason = STOP, reason
            else:
                self.state, self.reason = HOLD, "the stop input was cleared: resuming from the measured state"
            return True

    @property
    def commanding(self) -> bool:
        """Whether chunks may be commanded (not stopped)."""
        return not self.stopped

    def resumed(self) -> bool:
        """A chunk was commanded: back to RUN. True when that ends a hold."""
        with self._lock:
            if self.stopped or self.state == RUN:
                return False
            self.state, self.reason = RUN, ""
            return True


class LimitCounter:
    """How often each limit acted, per (output, joint, kind), since the start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self._new: Counter[tuple[str, str, str]] = Counter()  # since the last `take_new` (the log line)

    def add(self, output: str, labels: tuple[str, ...], hits: dict[str, np.ndarray]) -> int:
        n = 0
        with self._lock:
            for kind, per_joint in hits.items():
                for label, count in zip(labels, per_joint):
                    if count:
                        self.counts[(output, label, kind)] += int(count)
                        self._new[(output, label, kind)] += int(count)
                        n += int(count)
        return n

    def take_new(self) -> Counter[tuple[str, str, str]]:
        with self._lock:
            new, self._new = self._new, Counter()
        return new

    def snapshot(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self.counts)

    @staticmethod
    def describe(counts: Counter[tuple[str, str, str]] | dict[tuple[str, str, str], int]) -> str:
        return ", ".join(f"{o}/{j} {k} x{n}" for (o, j, k), n in sorted(counts.items()))


@dataclass
class _Measured:
    position: float
    stamp_ns: int


class MeasuredJoints:
    """The latest measured position of every joint by name (from every joint state message, all its joints)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._joints: dict[str, _Measured] = {}

    def put(self, names: list[str] | tuple[str, ...], positions: np.ndarray | list[float], stamp_ns: int) -> None:
        with self._lock:
            for name, p in zip(names, positions):
                p = float(p)
                if np.isfinite(p):
                    self._joints[str(name)] = _Measured(p, int(stamp_ns))

    def clear(self) -> None:
        with self._lock:
            self._joints.clear()

    def get(self, names: tuple[str, ...], now_ns: int | None = None, max_age_ns: int | None = None) -> np.ndarray | None:
        """The joints' positions, or None when one of them was never measured (or older than ``max_age_ns``)."""
        if not names:
            return None
        with self._lock:
            found = [self._joints.get(n) for n in names]
        if any(m is None for m in found):
            return None
        if now_ns is not None and max_age_ns is not None and any(now_ns - m.stamp_ns > max_age_ns for m in found):  # type: ignore[union-attr]
            return None
        return np.array([m.position for m in found])  # type: ignore[union-attr]
