"""On-policy demonstrations (DAgger): the policy drives, the expert labels every state it reaches.

Behaviour cloning only ever shows the policy states near the expert's path (plus the injected noise of
`dataset.py`). A cloned policy drifts into states of its own, and there it has no labels: measured on the
demo policy, its fingertips stopped 2-3 cm short of the object and it kept descending there, where the
expert would centre first. Here the current policy runs closed-loop episodes exactly as `evaluate.py` runs
them (the runtime's own preprocessing, `action_only`), and every tick yields the same samples as an expert
tick (`dataset.tick_samples`: its own sample, the goal alternatives, colours permuted) labelled by the
expert from the state the policy really reached (Ross et al., 2011). The trainer adds them to its data
and trains on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from oxygen_ros.runtime import PolicyRuntime

from .dataset import CONTROL_PERIOD_S, DemoSample, tick_samples, training_seeds
from .episode import DEFAULT_TIME_LIMIT_S, EpisodeSpec, SimEpisode
from .evaluate import EvalSettings, run_episode
from .expert import expert_chunk
from .scene import COLOURS

ON_POLICY_STREAM = 2  # training_seeds stream of the on-policy episodes (the expert data use stream 0)


@dataclass
class OnPolicyData:
    samples: list[DemoSample] = field(default_factory=list)
    episodes: int = 0
    successes: int = 0  # episodes the policy solved by itself (training seeds: a rough skill gauge)
    seeds: list[int] = field(default_factory=list)  # the episodes' scene seeds, in order


def policy_samples(runtime: PolicyRuntime, seed: int, episodes: int, progress: bool = True,
                   time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> OnPolicyData:
    """``episodes`` closed-loop episodes of ``runtime``'s policy on training seeds drawn from ``seed``,
    every tick labelled by the expert; deterministic for (weights, seed, episodes). The runtime must run
    ``action_only``: text is not needed here, and decoding it would only cost time."""
    if runtime.config.engine_mode != "action_only":
        raise ValueError(f"on-policy rollouts need an action_only runtime, not {runtime.config.engine_mode!r}")
    horizon, size = runtime.model_config.action_horizon, runtime.image_size
    settings = EvalSettings(control_period_s=CONTROL_PERIOD_S, time_limit_s=time_limit_s)
    data = OnPolicyData()
    seeds = training_seeds(seed, ON_POLICY_STREAM)
    bar = tqdm(range(episodes), desc="on-policy episodes", disable=not progress, dynamic_ncols=True, leave=False)
    with torch.inference_mode():
        for _ in bar:
            spec = EpisodeSpec.from_seed(next(seeds))
            rng = np.random.default_rng([spec.seed, 13])

            def label(episode: SimEpisode, _step: object) -> None:
                labels = expert_chunk(episode.scene, episode.target, horizon, settings.control_period_s)
                permutation = rng.permutation(len(COLOURS))
                data.samples.extend(tick_samples(episode, labels, permutation, size, horizon, settings.control_period_s, rng))

            result = run_episode(runtime, spec, settings, on_tick=label)
            data.episodes += 1
            data.seeds.append(spec.seed)
            data.successes += result.success
            bar.set_postfix(success=f"{data.successes}/{data.episodes}", samples=len(data.samples))
    return data
