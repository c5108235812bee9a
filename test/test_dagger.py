"""DAgger data: the policy drives real simulated episodes and the expert labels the states it reached."""

from __future__ import annotations

import json

import numpy as np
import pytest

from oxygen_ros.runtime import PolicyRuntime, RuntimeConfig
from oxygen_ros.sim.dagger import policy_samples
from oxygen_ros.sim.dataset import CONTROL_PERIOD_S, TRAIN_SEED_BASE, drawn_distractor
from oxygen_ros.sim.episode import DEFAULT_TIME_LIMIT_S, EpisodeSpec, SimEpisode
from oxygen_ros.sim.evaluate import EvalSettings, run_episode
from oxygen_ros.sim.expert import expert_chunk

LIMIT_S = 1.0  # 5 ticks per episode


@pytest.fixture(scope="module")
def runtime() -> PolicyRuntime:
    return PolicyRuntime.load(RuntimeConfig(model_preset="tiny", engine_mode="action_only", num_threads=1))


def test_every_tick_the_policy_reached_is_labelled_by_the_expert(runtime: PolicyRuntime) -> None:
    data = policy_samples(runtime, seed=3, episodes=2, progress=False, time_limit_s=LIMIT_S)
    assert data.episodes == 2 and len(data.seeds) == 2 and all(s >= TRAIN_SEED_BASE for s in data.seeds)
    # Replay the same episodes (the runtime is deterministic per episode) and record what the robot saw.
    states, labels, names = [], [], []

    def record(episode: SimEpisode, _step: object) -> None:
        states.append(episode.state.copy())
        labels.append(expert_chunk(episode.scene, episode.target, runtime.model_config.action_horizon, 0.2))
        names.append(len(episode.scene.objects))

    for seed in data.seeds:
        run_episode(runtime, EpisodeSpec.from_seed(seed), EvalSettings(time_limit_s=LIMIT_S), on_tick=record)
    # Per tick: its own sample, then one per other object (nothing is held by a random policy this early).
    own = [0]
    for n in names[:-1]:
        own.append(own[-1] + n)
    assert len(data.samples) == sum(names)
    for k, i in enumerate(own):
        sample = data.samples[i]
        np.testing.assert_array_equal(sample.state, states[k])
        np.testing.assert_array_equal(sample.actions, labels[k].astype(np.float32))
    # The policy moved the arm: the states differ from tick to tick, not the expert's own path.
    assert any(not np.allclose(states[k], states[k + 1]) for k in range(len(states) - 1))


def test_with_variations_the_policy_also_meets_distractors(runtime: PolicyRuntime) -> None:
    data = policy_samples(runtime, seed=11, episodes=8, progress=False, time_limit_s=LIMIT_S, variations=True)
    specs = [drawn_distractor(EpisodeSpec.from_seed(s), np.random.default_rng([s, 19])) for s in data.seeds]
    assert {s.distractor for s in specs} > {""}  # some scenes got one (P = 0.3 of 8), some not
    labelled = {sample.state.tobytes() for sample in data.samples}
    for spec in specs:  # the scenes the policy drove are the ones with the distractor: its states are labelled
        states: list[np.ndarray] = []
        run_episode(runtime, spec, EvalSettings(time_limit_s=LIMIT_S), on_tick=lambda e, _s: states.append(e.state.copy()))
        assert all(state.tobytes() in labelled for state in states)


def test_the_episodes_are_deterministic_for_the_seed(runtime: PolicyRuntime) -> None:
    a = policy_samples(runtime, seed=5, episodes=1, progress=False, time_limit_s=LIMIT_S)
    b = policy_samples(runtime, seed=5, episodes=1, progress=False, time_limit_s=LIMIT_S)
    c = policy_samples(runtime, seed=6, episodes=1, progress=False, time_limit_s=LIMIT_S)
    assert a.seeds == b.seeds != c.seeds
    assert all(np.array_equal(x.actions, y.actions) and x.instruction == y.instruction for x, y in zip(a.samples, b.samples))


def test_worker_processes_give_the_same_episodes_as_one_process(runtime: PolicyRuntime) -> None:
    import torch

    threads = torch.get_num_threads()
    one = policy_samples(runtime, seed=7, episodes=3, progress=False, time_limit_s=LIMIT_S, workers=1)
    two = policy_samples(runtime, seed=7, episodes=3, progress=False, time_limit_s=LIMIT_S, workers=2)
    assert torch.get_num_threads() == threads  # the rollouts' one thread does not leak into the caller
    assert one.seeds == two.seeds and one.successes == two.successes and len(one.samples) == len(two.samples) > 0
    for a, b in zip(one.samples, two.samples):
        np.testing.assert_array_equal(a.state, b.state)
        np.testing.assert_array_equal(a.actions, b.actions)
        assert a.instruction == b.instruction and a.texts == b.texts
        assert all(np.array_equal(x, y) for x, y in zip(a.images, b.images))


def test_a_runtime_that_decodes_text_is_refused() -> None:
    oxygen = PolicyRuntime.load(RuntimeConfig(model_preset="tiny", engine_mode="oxygen", tokens_per_frame=1, num_threads=1))
    with pytest.raises(ValueError, match="action_only"):
        policy_samples(oxygen, seed=0, episodes=1, progress=False)


def test_the_training_command_runs_dagger_rounds_on_the_simulator(tmp_path, capsys) -> None:  # noqa: ANN001
    from oxygen_ros.train.cli import main

    out = tmp_path / "policy"
    argv = ["--preset", "tiny", "--steps", "2", "--samples", "24", "--batch-size", "4", "--warmup-steps", "1",
            "--dagger-rounds", "1", "--dagger-episodes", "1", "--dagger-samples", "12", "--dagger-steps", "2",
            "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["steps"] == 4
    [round_] = report["dagger_rounds"]
    # The whole episode was rolled out: the untrained policy fails, so every tick of the time limit yields
    # at least its own sample.
    ticks = round(DEFAULT_TIME_LIMIT_S / CONTROL_PERIOD_S)
    assert round_["episodes"] == 1 and round_["successes"] == 0 and round_["on_policy_samples"] >= ticks
    assert round_["fresh_samples"] == 12
    assert json.loads((out / "train_summary.json").read_text())["dagger_rounds"] == [round_]
    assert main([*argv[:-2], "--dagger-episodes", "-1", "--out", str(out)]) == 2
    # the pointing loss with its first read off: the second read, in the last layer, is trained alone
    pointed = tmp_path / "pointed"
    argv = [*argv[:-2], "--dagger-rounds", "0", "--pointing-weight", "0.5", "--pointing-layers", "-1", "1", "--out", str(pointed)]
    assert main(argv) == 0
    summary = json.loads((pointed / "train_summary.json").read_text())
    assert summary["config"]["pointing_layers"] == [-1, 1] and "pointing" in summary["final_losses"]
