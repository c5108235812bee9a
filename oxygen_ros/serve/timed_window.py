"""The fleet benchmark's measuring window, the same for every protocol's client."""

from __future__ import annotations

import time
from collections.abc import Callable

WARM_REQUESTS = 3  # requests before the window: connections, caches and the server's first batch warmed


def timed_requests(request: Callable[[], object], start_at: float, seconds: float) -> list[float]:
    """Wait for ``start_at`` (``time.time``), then call ``request`` back to back for ``seconds``: each call's
    latency in ms."""
    time.sleep(max(0.0, start_at - time.time()))
    latencies, end = [], start_at + seconds
    while time.time() < end:
        t0 = time.perf_counter()
        request()
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies
