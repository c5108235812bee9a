"""Real-time chunking between consecutive chunks: remembers the last chunk and builds the guide for the next.

The new chunk's row i is due at ``stamp + (i + 1)·step``; the previous chunk's row ``i + shift`` is due at the
same instant, where ``shift`` is the number of steps between the two observations. The guide's target is the
previous chunk shifted by that much; its weights are 1 for the first d rows (d = the measured latency in
steps: those rows execute from the previous chunk while the new one is computed), then decay up to the
prefix-attention horizon (default: the whole overlap), then 0. Everything is in the model's normalized action
space, as the sampler sees it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oxygen_ros.engine.types import ChunkGuide
from oxygen_ros.model.network.rtc import SCHEDULES, prefix_weights

from .alignment import delay_steps


@dataclass(frozen=True)
class RtcSettings:
    enabled: bool = False
    beta: float = 5.0  # maximum guidance weight
    prefix_attention_horizon: int = 0  # rows of the new chunk guided at all; 0 = the whole overlap
    schedule: str = "exp"

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"rtc_schedule must be one of {list(SCHEDULES)}, got {self.schedule!r}")
        if not (self.beta >= 0 and np.isfinite(self.beta)):
            raise ValueError(f"rtc_beta must be finite and >= 0, got {self.beta}")
        if self.prefix_attention_horizon < 0:
            raise ValueError(f"rtc_prefix_attention_horizon must be >= 0, got {self.prefix_attention_horizon}")


class RealTimeChunker:
    """Holds the previous chunk (normalized) and its observation stamp; ``guide`` plans the next chunk."""

    def __init__(self, settings: RtcSettings) -> None:
        self.settings = settings
        self._previous: tuple[int, np.ndarray] | None = None

    def reset(self) -> None:
        self._previous = None

    def record(self, stamp_ns: int, actions: np.ndarray) -> None:
        """The chunk just sampled from the observation at ``stamp_ns`` ([H, A], normalized)."""
        self._previous = (stamp_ns, np.array(actions, dtype=np.float32))

    def guide(self, stamp_ns: int, step_period_s: float, latency_s: float) -> ChunkGuide | None:
        """The guide for a chunk from the observation at ``stamp_ns`` expected to arrive ``latency_s`` later;
        None when RTC is off, there is no previous chunk, or it does not overlap the new one."""
        if not self.settings.enabled or self._previous is None or step_period_s <= 0:
            return None
        prev_stamp, prev = self._previous
        horizon = prev.shape[0]
        shift = round((stamp_ns - prev_stamp) / 1e9 / step_period_s)
        overlap = horizon - shift
        if shift < 0 or overlap <= 0:
            return None  # an older observation, or the previous chunk has run out
        target = np.zeros_like(prev)
        target[:overlap] = prev[shift:]
        end = min(self.settings.prefix_attention_horizon or overlap, overlap)
        d = delay_steps(latency_s, step_period_s)
        weights = prefix_weights(d, end, horizon, self.settings.schedule)
        return ChunkGuide(torch.from_numpy(target), weights, self.settings.beta)
