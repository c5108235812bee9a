"""Topic statistics for /diagnostics: how old each input is when a tick uses it, and how long a chunk takes
from its observation's stamp to its publication (both on the node clock, so they follow sim time).

Integrators read these to find a slow camera driver, a clock offset between machines or a policy that
cannot keep up: `input ages` per camera topic (and the joint states) are measured at every control tick,
`chunk latency` at every published chunk, each as last / mean / max over the latest `window` samples.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Mapping, Sequence

from diagnostic_msgs.msg import DiagnosticStatus, KeyValue

__all__ = ["TopicStatistics"]


class _Series:
    def __init__(self, window: int) -> None:
        self.values: deque[float] = deque(maxlen=window)

    def add(self, value: float) -> None:
        self.values.append(value)

    def summary(self) -> dict[str, float]:
        v = self.values
        return {"last": v[-1], "mean": sum(v) / len(v), "max": max(v)} if v else {}


class TopicStatistics:
    """Thread-safe: the model thread records, the diagnostics timer reports."""

    def __init__(self, inputs: Sequence[str], window: int = 50, prefix: str = "oxygen_ros") -> None:
        self.inputs = [t for t in inputs if t]
        self.prefix = prefix
        self._lock = threading.Lock()
        self._ages = {topic: _Series(window) for topic in self.inputs}
        self._latency = _Series(window)

    def record_ages(self, ages_s: Mapping[str, float | None]) -> None:
        """Ages (seconds, node clock minus stamp) of the latest input per topic at a tick; None = nothing yet."""
        with self._lock:
            for topic, age in ages_s.items():
                if age is not None and topic in self._ages:
                    self._ages[topic].add(age)

    def record_chunk_latency(self, seconds: float) -> None:
        with self._lock:
            self._latency.add(seconds)

    def status(self, hardware_id: str = "") -> DiagnosticStatus:
        with self._lock:
            ages = {topic: series.summary() for topic, series in self._ages.items()}
            latency = self._latency.summary()
        values: list[KeyValue] = []
        for topic, summary in ages.items():
            for key, value in summary.items() or {"last": None}.items():
                values.append(KeyValue(key=f"input_age_s {topic} {key}", value="n/a" if value is None else f"{value:.6f}"))
        for key, value in (latency.items() or {"last": None}.items()):
            values.append(KeyValue(key=f"chunk_latency_s {key}", value="n/a" if value is None else f"{value:.6f}"))
        silent = [topic for topic, summary in ages.items() if not summary]
        msg = DiagnosticStatus(name=f"{self.prefix}: topics", hardware_id=hardware_id, values=values)
        if silent:
            msg.level, msg.message = DiagnosticStatus.WARN, f"no input measured yet on {', '.join(silent)}"
        elif latency:
            msg.level, msg.message = DiagnosticStatus.OK, f"chunk latency {latency['mean'] * 1e3:.1f} ms (mean)"
        else:
            msg.level, msg.message = DiagnosticStatus.OK, "no chunk yet"
        return msg
