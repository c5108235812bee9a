"""Per-request text output: token ids → UTF-8 deltas, with stop strings that never leak into the stream."""

from __future__ import annotations

from collections.abc import Sequence

from oxygen_ros.model.tokenizers.tokenizer import IncrementalDecoder, Tokenizer


class TextStream:
    """Turns one request's generated tokens into text deltas.

    Text that could still turn out to be the beginning of a stop string is held back until it is known
    not to be, so a consumer never sees part of a stop string. Without a tokenizer the deltas are empty
    and only token ids flow.
    """

    def __init__(self, tokenizer: Tokenizer | None, stop: Sequence[str] = ()) -> None:
        self._decoder = IncrementalDecoder(tokenizer, strip_leading_space=False) if tokenizer else None
        self._vocab = tokenizer.vocab_size if tokenizer else 0
        self._stop = [s for s in stop if s]
        self._pending = ""  # decoded but not yet emitted
        self.stopped = False

    def push(self, token_id: int) -> str:
        """Add a token; return the text now safe to emit. Sets ``stopped`` when a stop string appears."""
        # A model vocabulary may be padded past the tokenizer's; such ids carry no text.
        if self._decoder is None or not 0 <= token_id < self._vocab:
            return ""
        self._pending += self._decoder.push(token_id)
        return self._release(final=False)

    def finish(self) -> str:
        """End of the request: whatever is left (minus a stop string)."""
        if self._decoder is None:
            return ""
        self._pending += self._decoder.flush()
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        for stop in self._stop:
            at = self._pending.find(stop)
            if at >= 0:
                self.stopped = True
                out, self._pending = self._pending[:at], ""
                return out
        if final or not self._stop:
            out, self._pending = self._pending, ""
            return out
        hold = max((_overlap(self._pending, s) for s in self._stop), default=0)
        cut = len(self._pending) - hold
        out, self._pending = self._pending[:cut], self._pending[cut:]
        return out


def _overlap(text: str, stop: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``stop``."""
    for n in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0
