"""A transport delay for the simulated robot: what it sends or receives is handed on a fixed time later.

Stands in for a network link where the kernel cannot add one (no ``tc netem``): observations leave the robot
``delay_s`` after they were taken (their stamps keep the capture time), commands take effect ``delay_s`` after
they were sent. Not thread-safe: the owner serializes ``push`` and ``due``."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class DelayLine:
    delay_s: float
    _queue: deque[tuple[float, Callable[[], None]]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if not self.delay_s >= 0:
            raise ValueError(f"a transport delay must be >= 0 s, got {self.delay_s}")

    def push(self, now_s: float, action: Callable[[], None]) -> None:
        """Run ``action`` at ``now_s + delay_s`` (at once without a delay); actions keep their order."""
        if self.delay_s == 0:
            action()
        else:
            self._queue.append((now_s + self.delay_s, action))

    def due(self, now_s: float) -> int:
        """Run every action whose time has come; returns how many ran."""
        ran = 0
        while self._queue and self._queue[0][0] <= now_s:
            self._queue.popleft()[1]()
            ran += 1
        return ran

    def __len__(self) -> int:
        return len(self._queue)
