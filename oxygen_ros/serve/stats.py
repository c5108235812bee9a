"""Counters and the periodic rate/latency line of the server (as the node's diagnostics and progress lines)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np


@dataclass
class ServeStats:
    counters: Counter = field(default_factory=Counter)  # connections, requests, chunks, errors.<kind>, ...
    _latencies_ms: list[float] = field(default_factory=list)  # replies since the last period line
    _batches: list[int] = field(default_factory=list)
    _since: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counters[key] += n

    def tick(self, batch: int, latencies_ms: list[float]) -> None:
        with self._lock:
            self.counters["ticks"] += 1
            self.counters["chunks"] += len(latencies_ms)
            self._batches.append(batch)
            self._latencies_ms.extend(latencies_ms)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counters)

    def period_line(self, connected: int) -> str | None:
        """The fleet's rate and latency since the previous call; None when nothing was served."""
        with self._lock:
            now = time.monotonic()
            span, lat, batches = now - self._since, self._latencies_ms, self._batches
            self._since, self._latencies_ms, self._batches = now, [], []
            errors = sum(v for k, v in self.counters.items() if k.startswith("errors."))
        if not lat:
            return None
        p50, p95 = np.percentile(lat, [50, 95])
        return (f"{connected} clients: {len(lat) / span:.1f} chunks/s, latency p50 {p50:.0f} ms p95 {p95:.0f} ms, "
                f"{np.mean(batches):.1f} robots per tick, {errors} errors so far")  # fmt: skip
