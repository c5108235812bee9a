"""On-policy demonstrations (DAgger): the policy drives, the expert labels every state it reaches.

Behaviour cloning only ever shows the policy states near the expert's path (plus the injected noise of
`dataset.py`). A cloned policy drifts into states of its own, and there it has no labels: measured on the
demo policy, its fingertips stopped 2-3 cm short of the object and it kept descending there, where the
expert would centre first. Here the current policy runs closed-loop episodes exactly as `evaluate.py` runs
them (the runtime's own preprocessing, `action_only`), and every tick yields the same samples as an expert
tick (`dataset.tick_samples`: its own sample, the goal alternatives, colours permuted) labelled by the
expert from the state the policy really reached (Ross et al., 2011). With the variations on, its scenes
get the expert episodes' distractors too: a same-colour object is where a policy that half-reads the kind
word drifts, and only its own episodes show the expert what to do from there. The trainer adds the samples
to its data and trains on.

The episodes are independent, so they run in forked worker processes (each on one torch thread, the
policy's weights shared copy-on-write) and come back in seed order: the result is the same for any number
of workers.
"""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import torch
from tqdm import tqdm

from oxygen_ros.runtime import PolicyRuntime

from .dataset import CONTROL_PERIOD_S, DemoSample, drawn_distractor, tick_samples, training_seeds
from .episode import DEFAULT_TIME_LIMIT_S, EpisodeSpec, SimEpisode
from .evaluate import EvalSettings, run_episode
from .expert import expert_chunk
from .scene import COLOURS

T = TypeVar("T")
ON_POLICY_STREAM = 2  # training_seeds stream of the on-policy episodes (the expert data use stream 0)


@dataclass
class OnPolicyData:
    samples: list[DemoSample] = field(default_factory=list)
    episodes: int = 0
    successes: int = 0  # episodes the policy solved by itself (training seeds: a rough skill gauge)
    seeds: list[int] = field(default_factory=list)  # the episodes' scene seeds, in order


@dataclass(frozen=True)
class _Rollout:
    """What a worker needs besides the scene seed (inherited by the forked workers, never pickled)."""

    runtime: PolicyRuntime
    settings: EvalSettings
    variations: bool = False  # label with what users vary too (dataset.tick_samples)


_JOB: _Rollout | None = None  # set in the parent just before the workers fork


def _labelled_episode(seed: int) -> tuple[bool, list[DemoSample]]:
    """One closed-loop episode of the job's policy on scene ``seed``, every tick labelled by the expert."""
    assert _JOB is not None
    runtime, settings = _JOB.runtime, _JOB.settings
    horizon, size = runtime.model_config.action_horizon, runtime.image_size
    spec = EpisodeSpec.from_seed(seed)
    if _JOB.variations:  # the distractors of the expert's episodes, where the policy's own mistakes show most
        spec = drawn_distractor(spec, np.random.default_rng([seed, 19]))
    rng = np.random.default_rng([spec.seed, 13])
    samples: list[DemoSample] = []

    def label(episode: SimEpisode, _step: object) -> None:
        labels = expert_chunk(episode.scene, episode.target, horizon, settings.control_period_s)
        permutation = rng.permutation(len(COLOURS))
        samples.extend(tick_samples(episode, labels, permutation, size, horizon, settings.control_period_s, rng,
                                    _JOB.variations))  # fmt: skip

    with torch.inference_mode():
        result = run_episode(runtime, spec, settings, on_tick=label)
    return result.success, samples


def _one_thread() -> None:
    torch.set_num_threads(1)


def forked_episodes(episode: Callable[[int], T], seeds: list[int], workers: int) -> Iterator[T]:
    """``episode(seed)`` for each of ``seeds``, in order; one torch thread each, so the result does not depend on
    ``workers``. ``episode`` is a module-level function (what it needs set in a module global before the call:
    the forked workers inherit it, the policy without a copy; the runtime of action_only mode starts no threads)."""
    if workers <= 1:
        threads = torch.get_num_threads()
        _one_thread()
        try:
            yield from map(episode, seeds)
        finally:
            torch.set_num_threads(threads)
        return
    with multiprocessing.get_context("fork").Pool(workers, initializer=_one_thread) as pool:
        yield from pool.imap(episode, seeds)


def policy_samples(runtime: PolicyRuntime, seed: int, episodes: int, progress: bool = True, workers: int = 1, *,
                   time_limit_s: float = DEFAULT_TIME_LIMIT_S, variations: bool = False) -> OnPolicyData:
    """``episodes`` closed-loop episodes of ``runtime``'s policy on training seeds drawn from ``seed``,
    every tick labelled by the expert, run by ``workers`` processes; deterministic for (weights, seed,
    episodes). The runtime must run ``action_only``: text is not needed here, and decoding it would only
    cost time."""
    global _JOB
    if runtime.config.engine_mode != "action_only":
        raise ValueError(f"on-policy rollouts need an action_only runtime, not {runtime.config.engine_mode!r}")
    settings = EvalSettings(control_period_s=CONTROL_PERIOD_S, time_limit_s=time_limit_s)
    _JOB = _Rollout(runtime, settings, variations)
    try:
        return collect_episodes(_labelled_episode, list(itertools.islice(training_seeds(seed, ON_POLICY_STREAM), episodes)),
                                workers, progress)  # fmt: skip
    finally:
        _JOB = None


def collect_episodes(episode: Callable[[int], tuple[bool, list]], seeds: list[int], workers: int, progress: bool) -> OnPolicyData:
    """Every ``episode(seed)`` (success, samples) of ``seeds`` in order (``forked_episodes``), gathered, with a
    progress bar of the successes and samples so far."""
    data = OnPolicyData(seeds=seeds)
    bar = tqdm(forked_episodes(episode, seeds, min(workers, len(seeds))), total=len(seeds), desc="on-policy episodes",
               disable=not progress, dynamic_ncols=True, leave=False)  # fmt: skip
    for success, samples in bar:
        data.episodes += 1
        data.successes += success
        data.samples.extend(samples)
        bar.set_postfix(success=f"{data.successes}/{data.episodes}", samples=len(data.samples))
    return data
