"""Training data of the MuJoCo ALOHA's transfer cube and the recipe's path into openpi's ALOHA layout: the scene's
words come from its physics, the samples are deterministic expert steps, and a trained checkpoint goes back
through the ``aloha`` embodiment as a real fine-tune does."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from aloha_available import require_aloha

require_aloha()

from gym_aloha.utils import sample_box_pose  # noqa: E402

from oxygen_ros.embodiment import AdapterError, make_adapter  # noqa: E402
from oxygen_ros.engine import ASK_TASK  # noqa: E402
from oxygen_ros.model.network.config import TINY  # noqa: E402
from oxygen_ros.runtime.config import RuntimeConfig  # noqa: E402
from oxygen_ros.runtime.policy import PolicyRuntime  # noqa: E402
from oxygen_ros.sim.aloha import dataset, scene_texts  # noqa: E402
from oxygen_ros.sim.aloha.env import AlohaEnv  # noqa: E402
from oxygen_ros.sim.aloha.expert import expert_episode, replay  # noqa: E402
from oxygen_ros.sim.aloha.replan import ReplanningExpert  # noqa: E402
from oxygen_ros.train.recipes import ALOHA_DELTA_MASK, recipe, sources  # noqa: E402
from oxygen_ros.train.trainer import prepare, train  # noqa: E402

TINY_ALOHA = TINY.replace(action_horizon=50, prefix_attention="bidirectional")


def test_the_scenes_words_follow_the_expert_through_the_hand_over() -> None:
    """Narration in the order of the task, the note and answers saying where the cube started and then which arm
    holds it, and the cube's projection landing on its red pixels."""
    seed = 3
    env = AlohaEnv(fast_render=True)
    env.reset(seed)
    start = scene_texts.place(sample_box_pose(seed)[:3])
    phases, notes = [], []
    for k, action in enumerate(expert_episode(seed).actions):
        env.step(action)
        for seen, value in ((phases, scene_texts.phase(env.physics)), (notes, scene_texts.memory_note(env.physics))):
            if not seen or seen[-1] != value:
                seen.append(value)
        if k == 100:
            image = env.images(96, 96, ("top",))["top"]
            u, v = scene_texts.project(env.physics, "top", scene_texts.cube_position(env.physics))
            r, g, b = image[int(v * 96), int(u * 96)].astype(int)
            assert r > 200 and g < 90 and b < 90, (u, v, (r, g, b))
            assert scene_texts.answer(env.physics, "which arm holds the cube?") == "neither arm"
            assert scene_texts.answer(env.physics, "where is the cube?") == f"on the table, {start}"
        if k == 200:
            assert scene_texts.answer(env.physics, "which arm holds the cube?") == "the right arm"
    assert phases == list(scene_texts.PHASES)
    assert notes == [f"cube on the table, {start}", "cube in the right gripper", "cube in the left gripper"]
    assert scene_texts.answer(env.physics, "which arm holds the cube?") == "the left arm"
    with pytest.raises(ValueError, match="no answer"):
        scene_texts.answer(env.physics, "what colour is the cube?")
    assert set(phases + notes) <= set(scene_texts.vocabulary())


def test_samples_are_deterministic_expert_steps_in_alohas_dataset_space() -> None:
    first = list(itertools.islice(dataset.aloha_samples(5, 50, dataset.CONTROL_PERIOD_S, 56), 30))
    again = list(itertools.islice(dataset.aloha_samples(5, 50, dataset.CONTROL_PERIOD_S, 56), 30))
    other = next(dataset.aloha_samples(6, 50, dataset.CONTROL_PERIOD_S, 56))
    for a, b in zip(first, again):
        assert np.array_equal(a.state, b.state) and np.array_equal(a.actions, b.actions)
        assert all(np.array_equal(x, y) for x, y in zip(a.images, b.images)) and a.texts == b.texts
    assert not np.array_equal(first[0].actions, other.actions)
    s = first[-1]
    assert [im.shape for im in s.images] == [(56, 56, 3)] * 3 and s.state.shape == (14,) and s.actions.shape == (50, 14)
    assert all(0.0 <= g <= 1.0 for g in s.actions[:, [6, 13]].ravel())
    assert s.instruction == dataset.INSTRUCTION and s.question in scene_texts.QUESTIONS
    assert set(s.texts) == {"language", "memory", ASK_TASK} and s.texts["language"] in scene_texts.PHASES
    assert len(s.target_uvs) == 3 and s.target_uvs[0] is not None  # cam_high always sees the cube
    with pytest.raises(ValueError, match="control period"):
        next(dataset.aloha_samples(5, 50, 0.2, 56))


def test_an_episode_whose_noisy_execution_fails_gives_no_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    env = AlohaEnv(fast_render=True)
    monkeypatch.setattr(dataset, "CLEAN_SHARE", 0.0)
    monkeypatch.setattr(dataset, "NOISE_RAD", (0.5, 0.5))
    assert dataset.episode_samples(env, 1_000_001, np.random.default_rng(0), 50, 56) == []
    monkeypatch.setattr(dataset, "CLEAN_SHARE", 1.0)
    assert len(dataset.episode_samples(env, 1_000_001, np.random.default_rng(0), 50, 56)) > 40


def test_adapters_invert_their_action_transform_for_training_targets() -> None:
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(7, 14))
    actions[:, [6, 13]] = rng.uniform(0, 1, size=(7, 2))
    aloha = make_adapter("aloha")
    np.testing.assert_allclose(aloha.actions_out(aloha.actions_in(actions)), actions, atol=1e-12)
    units = make_adapter("scale_offset", {"scale": [2.0, 0.5], "offset": [1.0, 0.0]})
    np.testing.assert_allclose(units.actions_out(units.actions_in(actions[:, :2])), actions[:, :2], atol=1e-12)
    with pytest.raises(AdapterError, match="no inverse"):
        make_adapter("droid").actions_in(actions[:, :8])
    with pytest.raises(AdapterError, match="14 action dims"):
        aloha.actions_in(actions[:, :8])


def aloha_config(**changes: object):  # noqa: ANN201
    base = dataclasses.replace(recipe("aloha_transfer_cube"), steps=3, samples=60, data_workers=1, batch_size=4,
                               warmup_steps=1, model=TINY_ALOHA, threads=1)  # fmt: skip
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize("absolute", [True, False], ids=["absolute-as-the-recipe", "relative-arms"])
def test_targets_and_statistics_are_in_pis_space(tmp_path: Path, absolute: bool) -> None:
    """openpi's AlohaInputs: the state flipped and its grippers as pi's angle, the chunk's joints absolute (the
    recipe, as openpi's pi0_aloha_sim) or the arms' relative to that state (--no-absolute-actions, as its
    real-robot ALOHA recipes); unnormalized and sent back through AlohaOutputs they are the expert's chunk again."""
    cfg = aloha_config(delta_actions=not absolute)
    assert cfg.delta_mask(14) == ([] if absolute else list(ALOHA_DELTA_MASK))
    source, _, vocabulary = sources("aloha_transfer_cube", False)
    runtime, data, stats = prepare(cfg, source, tmp_path, vocabulary)
    assert runtime.adapter.name == "aloha" and cfg.text_task_names() == ["language", "memory", ASK_TASK]
    sample = next(source(cfg.seed * 100, 50, cfg.control_period_s, TINY_ALOHA.vision.image_size))
    adapter, mask = make_adapter("aloha"), np.array(cfg.delta_mask(14) or [False] * 14)
    model_state = adapter.state_in(sample.state)
    assert not np.allclose(model_state, sample.state)  # the flips and the gripper conversion did something
    restored = runtime.normalizer.unnormalize_actions(data.actions[0].numpy()) + np.where(mask, model_state, 0.0)
    np.testing.assert_allclose(adapter.actions_out(restored), sample.actions, atol=1e-4)
    assert np.all(stats["state"].q01[[1, 2]] < 0.5)  # shoulder and elbow flipped: pi's signs


def test_a_trained_checkpoint_is_served_through_the_aloha_embodiment(tmp_path: Path) -> None:
    cfg = aloha_config()
    source, _, vocabulary = sources("aloha_transfer_cube", False)
    train(cfg, source, tmp_path, vocabulary, progress=False)
    assert (tmp_path / "assets" / "trossen" / "norm_stats.json").exists()
    assert json.loads((tmp_path / "config.json").read_text()).get("delta_action_mask") is None  # absolute actions
    runtime = PolicyRuntime.load(RuntimeConfig(
        checkpoint=str(tmp_path), tokenizer=str(tmp_path / "tokenizer.model"), embodiment="auto", tokens_per_frame=2,
        n_action_steps=25, replan="n_action_steps"))  # fmt: skip
    assert runtime.adapter.name == "aloha"  # the asset id says so, as for openpi's own ALOHA checkpoints
    env = AlohaEnv(fast_render=True)
    state = env.reset(0)
    images = env.images(56, 56, dataset.CAMERAS)
    step = runtime.step(runtime.make_frame([images[c] for c in dataset.CAMERAS], state, dataset.INSTRUCTION, stamp_ns=1))
    assert step.actions.shape == (50, 14) and np.all(np.isfinite(step.actions))


def _expert_closed_loop(env: AlohaEnv, expert: ReplanningExpert, first: int, last: int) -> int | None:
    """The re-planning expert as the policy from step ``first``: a chunk every 25 steps; the step of success."""
    chunk = None
    for k in range(first, last):
        if (k - first) % 25 == 0:
            chunk = expert.chunk(env.physics, k, 50)
        env.step(chunk[(k - first) % 25])
        if env.success:
            return k
    return None


def test_the_replanning_expert_gives_the_experts_chunk_back_from_its_own_states() -> None:
    seed, expert = 4, ReplanningExpert()
    plan = expert_episode(seed).actions
    env = AlohaEnv()
    env.reset(seed)
    expert.begin(seed)
    arms = np.r_[0:6, 7:13]
    for k, action in enumerate(plan[:320]):
        if k % 80 == 0:
            chunk = expert.chunk(env.physics, k, 50)
            expected = plan[np.minimum(np.arange(k, k + 50), len(plan) - 1)]
            assert np.abs(chunk[:, arms] - expected[:, arms]).mean() < 0.03, k
            assert np.abs(chunk[:, [6, 13]] - expected[:, [6, 13]]).max() < 0.05, k
        env.step(action)


def _moved_cube_episode(seed: int, plan: np.ndarray, move_at: int, shift: tuple[float, float]) -> AlohaEnv:
    """The expert's episode to step ``move_at``, then the cube put ``shift`` (m) from where it started."""
    env = AlohaEnv()
    env.reset(seed)
    start = env.physics.object_poses()[0].copy()
    for action in plan[:move_at]:
        env.step(action)
    data, model = env.physics.physics.data, env.physics.physics.model
    adr = model.jnt_qposadr[model.name2id("red_box_joint", "joint")]
    data.qpos[adr : adr + 3] = [start[0] + shift[0], start[1] + shift[1], 0.02]  # (reset_context would reset the arms)
    data.qvel[:] = 0.0
    env.physics.physics.forward()
    return env


@pytest.mark.parametrize("move_at, shift", [(60, (-0.04, 0.03)), (176, (-0.05, 0.0))], ids=["before-the-descent", "from-the-grasp"])
def test_the_replanning_expert_follows_a_moved_cube_and_picks_a_missed_one_again(move_at: int, shift: tuple) -> None:
    """The cube moved before the descent: the pick goes where it is now. The cube taken from between the
    closing fingers: the right gripper opens, goes back over it, and the hand-over still happens. The
    open-loop plan fails both."""
    seed, expert = 4, ReplanningExpert()
    plan = expert_episode(seed).actions
    env = _moved_cube_episode(seed, plan, move_at, shift)
    assert all(not env.step(a) >= 4 for a in plan[move_at:])
    env = _moved_cube_episode(seed, plan, move_at, shift)
    expert.begin(seed)
    success = _expert_closed_loop(env, expert, move_at, move_at + 450)
    assert success is not None
    if move_at > 170:  # a second pick: the schedule shifted by well over 100 steps
        assert success > replay(plan, seed) + 100


def test_one_seed_writes_one_checkpoint_with_a_dagger_round(tmp_path: Path) -> None:
    """Expert data, a DAgger round labelled by the re-planning expert: the same bytes twice. In this process (one
    worker): the other tests have made EGL contexts here, which a forked MuJoCo renderer would inherit and hang on;
    the command line never renders before it forks."""
    cfg = aloha_config(samples=40, data_workers=1, dagger_rounds=1, dagger_episodes=2, dagger_fresh_samples=20, dagger_steps=2)
    source, on_policy, vocabulary = sources("aloha_transfer_cube", False)
    written = []
    for run in ("a", "b"):
        result = train(cfg, source, tmp_path / run, vocabulary, progress=False, on_policy=on_policy)
        assert result.dagger and result.dagger[0]["on_policy_samples"] > 0
        written.append([(tmp_path / run / name).read_bytes() for name in ("model.safetensors", "tokenizer.model", "config.json")])
    assert written[0] == written[1]
