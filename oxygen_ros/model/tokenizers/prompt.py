"""Prompt formats of pi0.5 (openpi) and OxyGen, tokenized with BOS and checked against the prompt budget.

Formats (task text cleaned as openpi's `PaligemmaTokenizer` does: strip, '_' and newline become spaces; case
is kept):
  - "pi05_state": ``"Task: {text}, State: {s0 s1 ...};\\nAction: "`` with the normalized state digitized into
    256 bins (openpi pi0.5 with discrete state input).
  - "pi05": ``"{text}"`` then a separately encoded ``"\\n"`` (openpi's prompt when no state is given).
  - "oxygen": ``"Task: {text}. Subtask: "`` (OxyGen's text-generation prompt; the model continues with a subtask).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from oxygen_ros.model.tokenizers.tokenizer import Tokenizer

PromptFormat = Literal["pi05_state", "pi05", "oxygen"]
PROMPT_FORMATS: tuple[str, ...] = ("pi05_state", "pi05", "oxygen")
NUM_STATE_BINS = 256


class PromptError(ValueError):
    """A prompt cannot be built from the given task, state or format."""


class PromptTooLongError(PromptError):
    """The tokenized prompt exceeds the model's prompt budget."""

    def __init__(self, num_tokens: int, max_tokens: int, fmt: str) -> None:
        self.num_tokens = num_tokens
        self.max_tokens = max_tokens
        self.fmt = fmt
        super().__init__(
            f"prompt ({fmt!r} format) is {num_tokens} tokens but at most {max_tokens} fit "
            f"(max_prompt_tokens); shorten the task text, raise max_prompt_tokens, or pass truncate=True"
        )


@dataclass(frozen=True)
class PromptTokens:
    """Token ids of a prompt (BOS first) and whether they were cut to fit."""

    ids: list[int]
    truncated: bool
    text: str = ""

    def __len__(self) -> int:
        return len(self.ids)


def clean_task_text(text: str) -> str:
    """openpi's cleaning of the task text: strip, then '_' and newlines become spaces (case kept)."""
    if not isinstance(text, str):
        raise PromptError(f"task text must be a str, not {type(text).__name__}")
    return text.strip().replace("_", " ").replace("\n", " ")


def discretize_state(state: np.ndarray | list[float], num_bins: int = NUM_STATE_BINS) -> np.ndarray:
    """Bin indices of a state normalized to [-1, 1], exactly as openpi and LeRobot digitize it:
    ``np.digitize(state, np.linspace(-1, 1, num_bins + 1)[:-1]) - 1``.

    Neither reference clips first, so a value below -1 (below q01) is bin -1 (the text "-1") and a value at or
    above 1 is bin num_bins - 1.
    """
    arr = np.asarray(state, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise PromptError(f"state must be a non-empty 1-D vector, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.flatnonzero(~np.isfinite(arr)).tolist()
        raise PromptError(f"state has non-finite values at indices {bad}")
    bins = np.linspace(-1.0, 1.0, num_bins + 1)[:-1]
    return np.digitize(arr, bins=bins) - 1


def format_prompt(task: str, state: np.ndarray | list[float] | None = None, fmt: PromptFormat = "pi05_state") -> str:
    """The prompt string (without the "\\n" that "pi05" encodes separately)."""
    text = clean_task_text(task)
    if fmt == "pi05_state":
        if state is None:
            raise PromptError("format 'pi05_state' needs the normalized state; pass state= or use fmt='pi05'")
        state_str = " ".join(str(int(b)) for b in discretize_state(state))
        return f"Task: {text}, State: {state_str};\nAction: "
    if fmt not in PROMPT_FORMATS:
        raise PromptError(f"unknown prompt format {fmt!r}; choose one of {PROMPT_FORMATS}")
    if state is not None:
        raise PromptError(f"format {fmt!r} does not include the state; use fmt='pi05_state' or drop state=")
    if fmt == "pi05":
        return text
    return f"Task: {text}. Subtask: "


def build_prompt_tokens(
    tokenizer: Tokenizer,
    task: str,
    state: np.ndarray | list[float] | None = None,
    fmt: PromptFormat = "pi05_state",
    max_tokens: int | None = None,
    truncate: bool = False,
) -> PromptTokens:
    """Tokenize a prompt: BOS + prompt text in the chosen format.

    Longer than `max_tokens` raises `PromptTooLongError`, or with `truncate=True` keeps the first `max_tokens`
    ids (as openpi does) and sets `truncated`.
    """
    text = format_prompt(task, state, fmt)
    ids = tokenizer.encode(text, add_bos=True)
    if fmt == "pi05":
        # openpi encodes the "start of answer" newline on its own.
        ids += tokenizer.encode("\n")
        text += "\n"
    if max_tokens is not None:
        if max_tokens <= 0:
            raise PromptError(f"max_tokens must be positive, got {max_tokens}")
        if len(ids) > max_tokens:
            if not truncate:
                raise PromptTooLongError(len(ids), max_tokens, fmt)
            return PromptTokens(ids=ids[:max_tokens], truncated=True, text=text)
    return PromptTokens(ids=ids, truncated=False, text=text)


def continuation_tokens(tokenizer: Tokenizer, text: str) -> list[int]:
    """Ids of text appended after an already-cached prefix (e.g. a task-specific continuation): no BOS."""
    if not isinstance(text, str):
        raise PromptError(f"continuation text must be a str, not {type(text).__name__}")
    return tokenizer.encode(text, add_bos=False)
