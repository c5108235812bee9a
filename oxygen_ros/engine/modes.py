"""The engine modes compared by the benchmark, all on the same model and the same inputs.

* ``action_only`` — prefill + action chunk, no text: the ceiling of the action path.
* ``sequential`` — each task prefills on its own; the frame's text is decoded to the end inside the frame.
* ``parallel``   — action and text as two isolated workers with their own model copy, run concurrently;
                   the frame takes as long as the slower one.
* ``shared``     — one prefill shared by action and text; text still decoded to the end inside the frame.
* ``oxygen``     — shared prefill + cross-frame continuous batching: requests outlive their frame and all
                   live requests advance together, k tokens per frame or as many as fit before a deadline.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from .engine import Engine
from .mode_names import MODES
from .policy import DeadlinePolicy, FixedTokensPolicy
from .types import FrameInput, TextEvent, TickResult


@dataclass
class FrameReport:
    tick: TickResult
    events: list[TextEvent]
    frame_s: float

    @property
    def tokens(self) -> int:
        return sum(len(e.token_ids) for e in self.events)


class ModeRunner:
    """Runs one frame of a mode: ``frame(inputs, noise)``; ``close()`` cancels what is still live."""

    name = "base"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def frame(self, frame: FrameInput, noise: torch.Tensor | None = None) -> FrameReport:
        t0 = time.perf_counter()
        tick, events = self._run(frame, noise)
        return FrameReport(tick, events, time.perf_counter() - t0)

    def _run(self, frame: FrameInput, noise: torch.Tensor | None) -> tuple[TickResult, list[TextEvent]]:
        raise NotImplementedError

    def close(self) -> list[TextEvent]:
        return self.engine.cancel_all()


class ActionOnlyRunner(ModeRunner):
    name = "action_only"

    def _run(self, frame: FrameInput, noise: torch.Tensor | None) -> tuple[TickResult, list[TextEvent]]:
        return self.engine.tick(frame, noise, tasks=[]), []


class SharedRunner(ModeRunner):
    name = "shared"

    def _run(self, frame: FrameInput, noise: torch.Tensor | None) -> tuple[TickResult, list[TextEvent]]:
        tick = self.engine.tick(frame, noise)
        return tick, self.engine.drain()


class SequentialRunner(ModeRunner):
    name = "sequential"

    def _run(self, frame: FrameInput, noise: torch.Tensor | None) -> tuple[TickResult, list[TextEvent]]:
        due = self.engine.due_tasks()
        tick = self.engine.tick(frame, noise, tasks=[])
        return tick, _isolated_text(self.engine, frame, due)


def _isolated_text(engine: Engine, frame: FrameInput, tasks: Sequence) -> list[TextEvent]:
    """Each task prefills the frame on its own and decodes to the end."""
    events: list[TextEvent] = []
    for task in tasks:
        prefix, _ = engine.prefill(frame)
        try:
            engine.start_requests(prefix, frame, [task])
        finally:
            engine.kv.release(prefix)
        events += engine.drain()
    return events


class ParallelRunner(ModeRunner):
    """Two isolated workers (own model copy, own KV pool) on threads of their own, each with half the
    caller's torch threads (so its chunks may differ from the other modes' in the last bit)."""

    name = "parallel"

    def __init__(self, engine: Engine, text_engine: Engine) -> None:
        super().__init__(engine)
        self.text_engine = text_engine
        # The two workers share the caller's intra-op threads (one each on two cores), set explicitly: a new
        # thread otherwise takes the count of the last set_num_threads in any thread (e.g. a lane's), so
        # its speed and its rounding would depend on what ran before.
        self._pool = ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="oxygen-parallel", initializer=torch.set_num_threads,
            initargs=(max(1, torch.get_num_threads() // 2),),
        )

    def _run(self, frame: FrameInput, noise: torch.Tensor | None) -> tuple[TickResult, list[TextEvent]]:
        due = self.engine.due_tasks()
        action = self._pool.submit(self.engine.tick, frame, noise, [])
        text = self._pool.submit(_isolated_text, self.text_engine, frame, due)
        return action.result(), text.result()

    def close(self) -> list[TextEvent]:
        self._pool.shutdown(wait=True)
        return self.engine.cancel_all() + self.text_engine.cancel_all()


class OxygenRunner(ModeRunner):
    """Shared prefill, then either k decode steps (``tokens_per_frame``) or as many as fit before
    ``frame_budget_s`` after the frame started (deadline-aware). With engine lanes the first of them overlaps
    the action chunk."""

    name = "oxygen"

    def __init__(self, engine: Engine, tokens_per_frame: int | None = 1, frame_budget_s: float | None = None) -> None:
        super().__init__(engine)
        if (tokens_per_frame is None) == (frame_budget_s is None):
            raise ValueError("give exactly one of tokens_per_frame or frame_budget_s")
        self.fixed = FixedTokensPolicy(tokens_per_frame) if tokens_per_frame else None
        self.deadline = DeadlinePolicy() if frame_budget_s else None
        self.frame_budget_s = frame_budget_s

    def _run(self, frame: FrameInput, noise: torch.Tensor | None) -> tuple[TickResult, list[TextEvent]]:
        start = time.monotonic()
        # With lanes, the frame's first decode step runs during the action chunk (it counts as one of the k).
        tick = self.engine.tick(frame, noise, decode_during_action=self.engine.lanes is not None)
        events = tick.events
        if self.fixed is not None:
            return tick, events + self.fixed.run(self.engine, steps=self.fixed.k - (1 if events else 0))
        assert self.deadline is not None and self.frame_budget_s is not None
        return tick, events + self.deadline.run(self.engine, start + self.frame_budget_s)


def make_runner(mode: str, engine: Engine, tokens_per_frame: int | None = 1, frame_budget_s: float | None = None) -> ModeRunner:
    """Build the runner for ``mode``; ``parallel`` clones the engine's model into a second worker."""
    if mode == "action_only":
        return ActionOnlyRunner(engine)
    if mode == "sequential":
        return SequentialRunner(engine)
    if mode == "shared":
        return SharedRunner(engine)
    if mode == "oxygen":
        return OxygenRunner(engine, tokens_per_frame, frame_budget_s)
    if mode == "parallel":
        return ParallelRunner(engine, engine.clone_with_model(copy.deepcopy(engine.model)))
    raise ValueError(f"unknown engine mode {mode!r}; choose one of {MODES}")
