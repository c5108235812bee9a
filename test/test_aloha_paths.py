"""The MuJoCo ALOHA's two closed loops are one path: the loop without DDS (`oxygen-sim eval --env
aloha_transfer_cube`) and `oxygen_node` with the simulator node over DDS in lockstep (`--through-node`) give the
same chunks and the same outcomes on the same seeds, for a small random-weight π0.5 and for a deliberately wild
one (its action output x30) whose physics errors end the same episodes at the same step and joint, the next
episode running on. Few steps, the file's 96 x 96 cameras."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aloha_available import require_aloha

require_aloha()

from oxygen_ros.sim_ros.aloha_loop import node_values, run_loop  # noqa: E402
from oxygen_ros.runtime import PolicyRuntime  # noqa: E402
from oxygen_ros.sim.aloha.evaluation import eval_config, episode_specs, load_params, small_checkpoint  # noqa: E402
from oxygen_ros.sim.evaluate import evaluate  # noqa: E402

PARAMS = Path(__file__).resolve().parents[1] / "config" / "aloha_demo.yaml"
STEPS = 100  # 2 s: four chunks of 25 steps an episode
# The file without its output limits (docs/safety.md's guard holds a random or wild model's commands).
UNGUARDED = {**{f"limit_{name}": [] for name in ("joints", "max_velocity", "max_distance", "lower", "upper")}, "resume_blend_s": 0.0}


class RecordingLoader:
    """Loads the node's runtime and keeps every chunk it computes."""

    def __init__(self) -> None:
        self.chunks: list[np.ndarray] = []

    def __call__(self, config: Any) -> PolicyRuntime:
        runtime = PolicyRuntime.load(config)
        step = runtime.step

        def recorded(*args: Any, **kwargs: Any) -> Any:
            result = step(*args, **kwargs)
            self.chunks.append(np.asarray(result.actions).copy())
            return result

        runtime.step = recorded  # type: ignore[method-assign]
        return runtime


def _both_loops(seeds: list[int], action_scale: float, through_topic: bool = False) -> tuple[list[Any], list[dict], list[np.ndarray]]:
    """The loop without DDS and over DDS on the same seeds. ``through_topic``: the policy node seeds each episode
    from the simulator's ``~/episode`` reports alone (aloha_demo.yaml's ``episode_topic``, as for two processes),
    not from the in-process loop's hook."""
    with small_checkpoint(action_scale=action_scale) as overrides:
        overrides = {**overrides, **UNGUARDED, "engine_mode": "action_only",
                     "episode_topic": "/oxygen_sim_node/episode" if through_topic else ""}
        params = load_params(PARAMS, overrides)
        runtime = PolicyRuntime.load(eval_config(params.config))
        settings = dataclasses.replace(params.settings, time_limit_s=STEPS * 0.02)
        specs = [s for s in episode_specs(params.wiring, min(seeds), max(seeds) - min(seeds) + 1) if s.seed in seeds]
        free = list(evaluate(runtime, specs, settings))
        loader = RecordingLoader()
        unhook = (lambda _, sim: setattr(sim, "on_episode_start", None)) if through_topic else None
        over_dds = run_loop(node_values(PARAMS, overrides), seeds, runtime_loader=loader, image_size=(96, 96), fast_render=True,
                            episode_steps=STEPS, timeout_s=600, on_ready=unhook)  # fmt: skip
    assert over_dds.sim_stats["timeouts"] == 0 and over_dds.sim_stats["stale_answers"] == 0
    return free, over_dds.episodes, loader.chunks


@pytest.mark.parametrize("through_topic", [False, True], ids=["in-process hook", "episode_topic"])
def test_the_same_seeds_give_the_same_chunks_and_outcomes_without_and_over_dds(through_topic: bool) -> None:
    free, episodes, chunks = _both_loops([3, 4], action_scale=1.0, through_topic=through_topic)
    assert [e["seed"] for e in episodes] == [r.spec.seed for r in free] == [3, 4]
    assert [(e["success"], e["steps"]) for e in episodes] == [(r.success, round(r.duration_s / 0.02)) for r in free]
    expected = [a for r in free for a in r.actions]
    assert len(chunks) == len(expected) == 8
    for got, want in zip(chunks, expected):
        np.testing.assert_array_equal(got, want)  # bit for bit


def test_a_wild_model_fails_the_same_episodes_at_the_same_step_over_dds_and_the_next_one_runs() -> None:
    free, episodes, _ = _both_loops([0, 1, 2], action_scale=30.0)
    assert len(episodes) == 3  # every episode ran: a physics error ends one episode, not the run
    broken = [e for e in episodes if e["failure"] is not None]
    assert broken, "the wild model was expected to break the physics"
    for e in broken:
        assert e["failure"]["reason"] == "physics_error" and e["failure"]["joint"] and e["steps"] == e["failure"]["step"]
    assert [e["failure"] for e in episodes] == [r.failure for r in free]
    assert not any(e["success"] for e in episodes)


@pytest.mark.parametrize("sizes", [((96, 96), (96, 96), (96, 96)), ((0, 0),) * 3])
def test_the_loop_without_dds_renders_at_the_files_camera_size(sizes: tuple) -> None:
    from oxygen_ros.sim.aloha.evaluation import camera_size

    assert camera_size(sizes) == (None if sizes[0] == (0, 0) else (96, 96))
    with pytest.raises(ValueError, match="one size"):
        camera_size(((96, 96), (64, 48), (96, 96)))
