"""How many batched decode steps to run between two ticks.

``DeadlinePolicy`` fills the measured slack before the next tick: it learns what a decode step costs at
each batch size and runs another step only while the prediction still fits. ``FixedTokensPolicy`` runs
exactly k steps per frame (the paper's setting). Both drive ``Engine.decode_step``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .engine import Engine
from .types import TextEvent


class StepCostModel:
    """Running estimate of one decode step's wall time as a function of batch size.

    Keeps an exponential average per batch size; an unseen size borrows the nearest seen one, scaled
    linearly by batch size (a step's cost grows slowly with B, so this over-predicts: a safe error).
    """

    def __init__(self, smoothing: float = 0.3, margin: float = 1.1) -> None:
        self.smoothing = smoothing
        self.margin = margin
        self._cost: dict[int, float] = {}

    def observe(self, batch: int, seconds: float) -> None:
        old = self._cost.get(batch)
        self._cost[batch] = seconds if old is None else old + self.smoothing * (seconds - old)

    def predict(self, batch: int) -> float | None:
        if not self._cost:
            return None
        if batch in self._cost:
            return self._cost[batch] * self.margin
        nearest = min(self._cost, key=lambda b: abs(b - batch))
        return self._cost[nearest] * max(1.0, batch / nearest) * self.margin


class DeadlinePolicy:
    """Decode while the next step is predicted to end before ``deadline`` (a ``time.monotonic`` value).

    Text never starves for good. Without a guard, one slow step (a page fault, the other core busy) leaves an
    estimate above every tick's slack, no step runs to correct it, and every live request (narration, answers
    over ``~/ask``) waits forever. So each call that runs no step while requests wait banks the slack it had;
    after ``patience`` such calls in a row, a call may spend the banked time on its first step, which may then
    end past ``deadline`` by at most the banked time and re-measures the cost. A single tick with little slack
    between ticks that do decode never overruns: the count starts again at every step.
    """

    def __init__(self, cost: StepCostModel | None = None, clock: Callable[[], float] = time.monotonic,
                 patience: int = 5) -> None:
        self.cost = cost or StepCostModel()
        self.clock = clock
        self.patience = patience
        self.banked_s = 0.0  # slack of the calls since the last step, none of which could fit one
        self.starved_calls = 0

    def run(self, engine: Engine, deadline: float, max_steps: int = 1_000) -> list[TextEvent]:
        events: list[TextEvent] = []
        stepped = False
        for _ in range(max_steps):
            batch = engine.live_requests
            if batch == 0:
                self.banked_s, self.starved_calls = 0.0, 0
                break
            now = self.clock()
            predicted = self.cost.predict(batch)
            end = deadline + (self.banked_s if not stepped and self.starved_calls >= self.patience else 0.0)
            # With no estimate yet, one step is taken if any slack is left, to learn the cost.
            if now + (predicted or 0.0) > end or now >= end:
                if not stepped:
                    self.banked_s += max(0.0, deadline - now)
                    self.starved_calls += 1
                break
            t0 = self.clock()
            events += engine.decode_step()
            self.cost.observe(batch, self.clock() - t0)
            stepped, self.banked_s, self.starved_calls = True, 0.0, 0
        return events


class FixedTokensPolicy:
    """Exactly ``k`` decode steps per frame (fewer if the requests run out)."""

    def __init__(self, tokens_per_frame: int) -> None:
        if tokens_per_frame < 1:
            raise ValueError("tokens_per_frame must be >= 1")
        self.k = tokens_per_frame

    def run(self, engine: Engine, deadline: float | None = None, steps: int | None = None) -> list[TextEvent]:
        """``steps`` (default k) steps; the caller passes fewer when it already ran some this frame."""
        events: list[TextEvent] = []
        for _ in range(self.k if steps is None else steps):
            if engine.live_requests == 0:
                break
            events += engine.decode_step()
        return events
