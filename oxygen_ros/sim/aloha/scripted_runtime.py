"""The scripted expert in the place of a model: the node's real runtime whose action sampler returns the
expert's next actions as the model's normalized output (``model_space``).

Loaded by the node instead of ``PolicyRuntime.load`` (its ``runtime_loader``): the checkpoint, prefill,
statistics, relative actions and embodiment transforms are the real ones; only the network's sample is
replaced. The expert is open loop (ACT's recorded joints, one action a step from the episode's start), so
the chunk for an observation at episode step k is the expert's actions k … k + H - 1, the last one held;
the relative dims are computed from the simulator's true state (the state a trained model's deltas start
from), never from what the node believes it is: a wrong state conversion shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .expert import expert_episode
from .model_space import model_outputs


@dataclass(frozen=True)
class Observed:
    """What the simulator shows now: the episode's seed, its step, its time, and the dataset-space state."""

    seed: int
    step: int
    stamp_ns: int
    state: np.ndarray


class ExpertAsModel:
    def __init__(self, observe: Callable[[], Observed], task_name: str = "transfer_cube") -> None:
        self.observe = observe
        self.task_name = task_name
        self.runtime = None
        self.chunks = 0
        self.stale_frames = 0  # frames whose stamp was not the simulator's time (an observation not yet delivered)
        self._plans: dict[int, np.ndarray] = {}
        self._pending: np.ndarray | None = None

    def load(self, config):  # noqa: ANN001, ANN201 (the node's RuntimeLoader signature)
        from oxygen_ros.runtime import PolicyRuntime

        runtime = PolicyRuntime.load(config)
        step = runtime.step

        def scripted_step(frame, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            self._pending = self.chunk(frame.stamp_ns)
            return step(frame, *args, **kwargs)

        runtime.step = scripted_step
        runtime.engine.sample_actions = self._sample
        self.runtime = runtime
        return runtime

    def chunk(self, stamp_ns: int) -> np.ndarray:
        """The model output [H, action_dim] for the observation stamped ``stamp_ns``."""
        rt = self.runtime
        seen = self.observe()
        if stamp_ns != seen.stamp_ns:
            self.stale_frames += 1
        plan = self._plans.get(seen.seed)
        if plan is None:
            plan = self._plans[seen.seed] = expert_episode(seen.seed, self.task_name).actions
        horizon = rt.model_config.action_horizon
        rows = plan[np.minimum(np.arange(seen.step, seen.step + horizon), len(plan) - 1)]
        self.chunks += 1
        return model_outputs(rows, seen.state, rt.normalizer, rt.delta_action_mask, rt.model_config.action_dim)

    def _sample(self, k: torch.Tensor, v: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        if self._pending is None:  # the warm-up chunk at load
            return torch.zeros_like(noise)
        out, self._pending = self._pending, None
        return torch.from_numpy(out).to(device=noise.device, dtype=noise.dtype)
