"""A policy that breaks the simulation fails its episode, and the evaluation goes on to the next: the MuJoCo
ALOHA driven by a deliberately wild model (its action output projection scaled x30) reports MuJoCo's physics
error with the step and the joint; the table-top arm driven by a model whose actions are NaN reports the
non-finite chunk. Both without DDS (`oxygen_ros.sim.evaluate`), one by one and several environments at once."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from oxygen_ros.runtime import PolicyRuntime, RuntimeConfig
from oxygen_ros.sim.evaluate import EvalSettings, eval_specs, evaluate, summarize

PARAMS = Path(__file__).resolve().parents[1] / "config" / "aloha_demo.yaml"
# The file without its output limits (docs/safety.md's guard would hold the wild commands): the physics sees them.
UNGUARDED = {f"limit_{name}": [] for name in ("joints", "max_velocity", "max_distance", "lower", "upper")}


def test_nan_actions_fail_each_table_top_episode_and_the_next_one_runs() -> None:
    runtime = PolicyRuntime.load(RuntimeConfig(model_preset="tiny", engine_mode="action_only", num_threads=1))
    with torch.no_grad():
        runtime.model.action_out_proj.bias.fill_(math.nan)
    settings = EvalSettings(time_limit_s=2.0)
    results = list(evaluate(runtime, eval_specs(0, 3), settings))
    assert [r.spec.seed for r in results] == [0, 1, 2]
    for r in results:
        assert not r.success and r.chunks == 1
        assert r.failure["reason"] == "non_finite_action" and r.failure["step"] == 0
        assert r.failure["joint"] == settings.joint_names[0]
    assert summarize(results, runtime, settings)["failures"] == {"non_finite_action": 3}


def test_a_wild_model_breaks_mujocos_physics_and_every_episode_still_runs() -> None:
    from aloha_available import aloha_problem

    if aloha_problem():
        pytest.skip(aloha_problem())
    from oxygen_ros.sim.aloha.evaluation import eval_config, episode_specs, load_params, small_checkpoint
    from oxygen_ros.sim.aloha.units import ARM_JOINTS

    with small_checkpoint(action_scale=30.0) as overrides:
        params = load_params(PARAMS, {**overrides, **UNGUARDED})
        runtime = PolicyRuntime.load(eval_config(params.config, engine_mode="action_only"))
        specs = episode_specs(params.wiring, 0, 3)
        one = list(evaluate(runtime, specs, params.settings))
        two = sorted(evaluate(runtime, specs, params.settings, envs=2), key=lambda r: r.spec.seed)
    assert [r.spec.seed for r in one] == [0, 1, 2]
    broken = [r for r in one if r.failure is not None]
    assert broken, "the wild model was expected to break the physics"
    joints = {f"{arm}_{j}" for arm in ("left", "right") for j in ARM_JOINTS}
    for r in one:
        assert not r.success
        if r.failure is None:  # no physics error: it ran to the step limit
            assert r.duration_s == pytest.approx(8.0)
            continue
        assert r.failure["reason"] == "physics_error" and "mjWARN_BADQACC" in r.failure["message"]
        assert r.failure["joint"] in joints and 0 < r.failure["step"] < 400
        assert r.duration_s == pytest.approx(r.failure["step"] * 0.02)  # it ended at the step that broke
    summary = summarize(one, runtime, params.settings)
    assert summary["episodes"] == 3 and summary["failures"] == {"physics_error": len(broken)}
    assert [(r.spec.seed, r.failure, r.chunks) for r in one] == [(r.spec.seed, r.failure, r.chunks) for r in two]


def test_an_unstable_scene_says_when_and_where_and_the_next_reset_starts_clean() -> None:
    """What the expert commands and the drivers build on: MuJoCo's PhysicsError as the step and the joint."""
    from aloha_available import aloha_problem

    if aloha_problem():
        pytest.skip(aloha_problem())
    import numpy as np

    from oxygen_ros.sim.aloha.driver import EpisodeRecord
    from oxygen_ros.sim.aloha.env import AlohaEnv
    from oxygen_ros.sim.aloha.physics import SceneUnstable

    env = AlohaEnv(fast_render=True)
    env.reset(0)
    wild = np.random.default_rng(0)
    with pytest.raises(SceneUnstable) as caught:
        for _ in range(100):  # targets far outside the joints' range; the grippers' most of all
            action = wild.normal(0.0, 10.0, 14)
            action[[6, 13]] = wild.normal(0.5, 20.0, 2)
            env.step(action)
    failure = caught.value.failure
    assert failure["reason"] == "physics_error" and failure["step"] == env.steps + 1 and failure["joint"].startswith(("left_", "right_"))
    record = EpisodeRecord(0, 0, 1, steps=failure["step"], failure=failure)
    assert record.outcome().startswith(f"failed: physics_error at step {failure['step']} (joint {failure['joint']})")
    state = env.reset(1)  # a new episode from a clean scene
    assert np.allclose(state[:6], [0, -0.96, 1.16, 0, -0.3, 0], atol=0.02) and env.step(state) == 0
