"""On-policy demonstrations on the MuJoCo ALOHA (DAgger): the policy hands the cube over by itself, and the
re-planning expert (``replan.ReplanningExpert``) labels the states it reaches.

The policy runs as the node runs it on this robot: a chunk from each observation, its first N_ACTION_STEPS
actions executed one per 20 ms step (config/robots/aloha.yaml: n_action_steps 25, replan n_action_steps), in
ALOHA's dataset space through the runtime's embodiment (``action_only``: no text). Every STRIDE-th step
(from an offset drawn per episode) is a sample as in ``dataset``, its chunk the expert's from there. The
episodes run in forked processes and come back in seed order (``sim.dagger.forked_episodes``): the same
samples for any number of workers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from oxygen_ros.runtime import PolicyRuntime

from ..dagger import OnPolicyData, collect_episodes
from .dataset import CAMERAS, INSTRUCTION, STRIDE, AlohaSample, make_sample, training_seeds
from .env import AlohaEnv
from .physics import SceneUnstable
from .expert import EPISODE_STEPS
from .replan import ReplanningExpert

N_ACTION_STEPS = 25
ON_POLICY_STREAM = 2  # training_seeds stream of the on-policy episodes (the expert data use the first)
NS_PER_STEP = 20_000_000


@dataclass(frozen=True)
class _Rollout:
    runtime: PolicyRuntime


_JOB: _Rollout | None = None  # set just before the workers fork


def _labelled_episode(seed: int) -> tuple[bool, list[AlohaSample]]:
    assert _JOB is not None
    runtime = _JOB.runtime
    horizon, size = runtime.model_config.action_horizon, runtime.image_size
    rng = np.random.default_rng([seed, 13])
    first = int(rng.integers(0, STRIDE))
    env, expert = AlohaEnv(fast_render=True), ReplanningExpert()
    env.reset(seed)
    expert.begin(seed)
    runtime.start_episode(seed)  # the noise of the episode's seed, as in evaluation
    samples: list[AlohaSample] = []
    chunk: np.ndarray | None = None
    for k in range(EPISODE_STEPS):
        if k % STRIDE == first:
            labels = expert.chunk(env.physics, k, horizon)
            if labels is not None:  # a state the expert cannot follow from gives no sample
                samples.append(make_sample(env, labels, size, rng))
        if k % N_ACTION_STEPS == 0:
            images = env.images(size, size, CAMERAS)
            frame = runtime.make_frame([images[c] for c in CAMERAS], env.state(), INSTRUCTION, k * NS_PER_STEP)
            with torch.inference_mode():
                chunk = runtime.step(frame).actions
        assert chunk is not None
        try:
            env.step(chunk[k % N_ACTION_STEPS])
        except SceneUnstable:  # the policy broke the physics: the episode ends there, its samples so far kept
            break
        if env.success:
            break
    env.physics.physics.free()
    return env.success, samples


def policy_samples(runtime: PolicyRuntime, seed: int, episodes: int, progress: bool = True, workers: int = 1) -> OnPolicyData:
    """``episodes`` episodes of ``runtime``'s policy on training seeds drawn from ``seed``, labelled by the
    re-planning expert; deterministic for (weights, seed, episodes). ``runtime`` runs ``action_only``."""
    global _JOB
    if runtime.config.engine_mode != "action_only":
        raise ValueError(f"on-policy rollouts need an action_only runtime, not {runtime.config.engine_mode!r}")
    _JOB = _Rollout(runtime)
    try:
        return collect_episodes(_labelled_episode, list(itertools.islice(training_seeds(seed, ON_POLICY_STREAM), episodes)),
                                workers, progress)  # fmt: skip
    finally:
        _JOB = None
