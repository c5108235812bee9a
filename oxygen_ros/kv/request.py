"""State of one text request that decodes across frames."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from oxygen_ros.kv.pool import Extent
from oxygen_ros.kv.prefix import SharedPrefix

FINISH_REASONS = ("eos", "max_tokens", "stop", "cancelled", "evicted")


@dataclass(eq=False)
class TextRequest:
    """A text request forked from one frame's prefix.

    Its own ``extent`` holds the KV of the continuation prompt followed by the generated tokens; it is
    sized ``len(continuation) + max_tokens`` at admission so a running request never needs more memory.
    The tokens fed through the model so far are ``(continuation + generated)[:own_len]``; the rest (the
    continuation prompt at first, then the last sampled token) is fed by the next batched step.
    """

    id: int
    task: str
    frame_seq: int
    frame_stamp_ns: int
    prefix: SharedPrefix
    extent: Extent
    continuation: list[int]
    max_tokens: int
    own_len: int = 0
    generated: list[int] = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None
    created_at: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None

    @property
    def context_len(self) -> int:
        """Tokens of context already in the KV: the prefix plus this request's own tokens."""
        return self.prefix.length + self.own_len

    @property
    def next_position(self) -> int:
        """RoPE position of the next token fed through the model."""
        return self.prefix.length + self.own_len

    @property
    def fed_tokens(self) -> list[int]:
        """The token sequence this request feeds: continuation, then generated tokens."""
        return self.continuation + self.generated
