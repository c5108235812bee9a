"""Plain data passed between the engine and whatever drives it (the ROS node, bag replay, the benchmark)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(frozen=True)
class TextTask:
    """A text stream forked from frames: e.g. ``language`` every frame, ``memory`` every 10th frame.

    ``continuation`` is the tokenized task-specific prompt appended after the frame's prefix (at least one
    token: the first generated token comes from its last position).
    """

    name: str
    continuation: tuple[int, ...]
    every_n_frames: int = 1
    max_tokens: int = 30
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a text task needs a name")
        if not self.continuation:
            raise ValueError(f"text task {self.name!r}: the continuation prompt must have at least one token")
        if self.every_n_frames < 1 or self.max_tokens < 1:
            raise ValueError(f"text task {self.name!r}: every_n_frames and max_tokens must be >= 1")

    def due(self, tick_index: int) -> bool:
        return tick_index % self.every_n_frames == 0


@dataclass(frozen=True)
class ChunkGuide:
    """Real-time chunking for one chunk: steer its overlap with the still-executing previous chunk.

    ``target`` row i is the previous chunk's action for the same instant as the new chunk's row i (normalized
    model space, zeros where the previous chunk has none); ``weights`` [H] the soft prefix weights; ``beta``
    the maximum guidance weight (0 = plain sampling).
    """

    target: torch.Tensor  # [H, action_dim] float32
    weights: torch.Tensor  # [H] float32
    beta: float


@dataclass
class FrameInput:
    """One observation, already in model form (and, with real-time chunking, the chunk it continues)."""

    images: torch.Tensor  # [slots, 3, S, S] in [-1, 1]
    image_mask: torch.Tensor  # [slots] bool
    prompt_tokens: torch.Tensor  # [n] long, BOS first
    stamp_ns: int
    frame_seq: int
    robot_state: np.ndarray | None = None  # raw state, for actions relative to it (the engine does not read it)
    guide: ChunkGuide | None = None


@dataclass
class TickResult:
    frame_seq: int
    stamp_ns: int
    actions: np.ndarray | None = None  # [H, action_dim] float32, normalized action space; set by Engine.tick
    prefill_s: float = 0.0
    action_s: float = 0.0
    text_start_s: float = 0.0
    prefix_tokens: int = 0
    started: list[tuple[int, str]] = field(default_factory=list)  # (request id, task)
    waiting: list[tuple[int, str]] = field(default_factory=list)
    refused: list[tuple[int, str, str]] = field(default_factory=list)  # (request id, task, reason)
    events: list[TextEvent] = field(default_factory=list)  # text of a decode step run during the action chunk
    robot: str = ""  # the robot this tick served ("" the engine's first)


@dataclass
class TextEvent:
    """One increment of a text stream: the text that became complete with this token, or the end."""

    request_id: int
    task: str
    seq: int  # 0, 1, 2, ... within the request
    text: str
    token_ids: list[int]
    final: bool
    finish_reason: str  # "" while streaming
    frame_seq: int  # the frame the request was forked from
    frame_stamp_ns: int
    robot: str = ""  # the robot whose frame it was forked from ("" the engine's first)
