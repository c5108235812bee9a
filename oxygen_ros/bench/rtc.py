"""The cost of a real-time-chunking chunk next to a plain one (the part "A_rtc" of oxygen-bench).

A fixed guide, as the node builds it at steady state: the previous chunk shifted by one step, a delay of two
steps, the exponential schedule over the whole overlap and the paper's β = 5. The target values do not change
the work (one forward and one vector-Jacobian product through the action expert per Euler step).
"""

from __future__ import annotations

import torch

from oxygen_ros.engine.types import ChunkGuide
from oxygen_ros.model.network.config import ModelConfig
from oxygen_ros.model.network.rtc import prefix_weights

DELAY_STEPS = 2
BETA = 5.0


def bench_guide(config: ModelConfig) -> ChunkGuide:
    h = config.action_horizon
    previous = torch.linspace(-0.5, 0.5, h * config.action_dim).view(h, config.action_dim)
    target = torch.zeros_like(previous)
    target[: h - 1] = previous[1:]
    return ChunkGuide(target, prefix_weights(min(DELAY_STEPS, h - 1), h - 1, h, "exp"), BETA)
