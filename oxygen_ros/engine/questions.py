"""Questions asked while acting: one-off text requests forked from the NEXT frame's shared prefix.

A question waits here (holding no KV) until the engine's next tick, which forks it from that frame's prefix
right after the action chunk, exactly like a scheduled task's request: it shares the prefix by reference and
advances in the same batched decode steps. The queue is bounded; what does not fit is refused with a reason.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["ASK_TASK", "Question", "QuestionQueue", "QuestionRefused"]

ASK_TASK = "ask"  # the task name of question requests in TextEvents and TickResults


class QuestionRefused(Exception):
    """A question cannot be accepted; the message says why (queue full, KV budget, bad size)."""


@dataclass(frozen=True)
class Question:
    id: int  # the text request id it will have (reserved from the KV manager)
    continuation: tuple[int, ...]  # the question's prompt tokens, appended after the frame's prefix
    max_tokens: int
    stop: tuple[str, ...] = ()

    @property
    def tokens_needed(self) -> int:
        """KV tokens of its own once it runs: the continuation plus the answer."""
        return len(self.continuation) + self.max_tokens


class QuestionQueue:
    """Questions waiting for the next frame, in arrival order (not thread-safe: the engine's thread owns it)."""

    def __init__(self, max_pending: int) -> None:
        if max_pending < 0:
            raise ValueError(f"QuestionQueue: max_pending must be >= 0, got {max_pending}")
        self.max_pending = max_pending
        self._pending: OrderedDict[int, Question] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def tokens_needed(self) -> int:
        """KV tokens the pending questions will take when they fork."""
        return sum(q.tokens_needed for q in self._pending.values())

    def full(self) -> bool:
        return len(self._pending) >= self.max_pending

    def push(self, question: Question) -> None:
        if self.full():
            raise QuestionRefused(f"queue full: {len(self._pending)} questions already wait for the next frame")
        self._pending[question.id] = question

    def take_all(self) -> list[Question]:
        """Every pending question, oldest first; the queue is empty afterwards."""
        out = list(self._pending.values())
        self._pending.clear()
        return out

    def remove(self, question_id: int) -> Question | None:
        return self._pending.pop(question_id, None)
