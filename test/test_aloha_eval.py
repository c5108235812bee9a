"""The MuJoCo ALOHA in the closed loop without DDS (`oxygen-sim eval --env aloha_transfer_cube`): the scripted
expert as the model hands the cube over through config/aloha_demo.yaml's chain, the texts are scored against the
scene's truth at the frame they were forked from, several environments at once give the outcomes of one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aloha_available import require_aloha

require_aloha()

from oxygen_ros.engine import ASK_TASK  # noqa: E402
from oxygen_ros.runtime import PolicyRuntime  # noqa: E402
from oxygen_ros.apps import oxygen_sim as cli  # noqa: E402 (oxygen-sim, --through-node included)
from oxygen_ros.sim.aloha import scene_texts  # noqa: E402
from oxygen_ros.sim.aloha.episode import AlohaEpisodeSpec, AlohaWiring  # noqa: E402
from oxygen_ros.sim.aloha.evaluation import eval_config, episode_specs, expert_as_model, load_params, small_checkpoint  # noqa: E402
from oxygen_ros.sim.evaluate import EvalSettings, run_episode, summarize  # noqa: E402

PARAMS = Path(__file__).resolve().parents[1] / "config" / "aloha_demo.yaml"


def test_expert_as_model_hands_the_cube_over_and_texts_are_scored_at_their_frames() -> None:
    """Through the runtime, the aloha adapter, aloha_demo.yaml's conversions and the simulated drivers, the
    expert's chunks succeed where the expert does (reward 4 at step 220); each text's label is the scene's truth
    at the frame it was forked from, read here from the physics at that frame."""
    with small_checkpoint() as overrides:
        params = load_params(PARAMS, overrides)
        runtime, expert, running = expert_as_model(eval_config(params.config))
        settings = EvalSettings(**{**vars(params.settings), "questions": 2})
        truth: dict[tuple[int, int], dict[str, str]] = {}

        def at_frame(episode, step) -> None:  # noqa: ANN001 - after the chunk of frame step.tick.frame_seq
            phys = episode.physics
            truth[(episode.spec.seed, step.tick.frame_seq)] = {"language": scene_texts.phase(phys),
                                                                "memory": scene_texts.memory_note(phys)}  # fmt: skip

        results = [run_episode(runtime, spec, settings, on_tick=at_frame) for spec in episode_specs(params.wiring, 0, 3, on_start=running)]
    assert [r.success for r in results] == [True] * 3
    assert all(4.0 <= r.time_to_success_s <= 4.8 for r in results)  # the expert's own: step 220 of 400
    assert expert.stale_frames == 0 and expert.chunks == sum(r.chunks for r in results)
    assert all(r.chunks == 9 for r in results)  # a chunk every 25 steps of 20 ms until step 220
    for r in results:
        said = [t for t in r.texts if t.task in ("language", "memory")]
        assert len([t for t in said if t.task == "language"]) == r.chunks  # every frame's narration finished
        assert all(t.label == truth[(r.spec.seed, t.frame_seq)][t.task] for t in said)
        phases = [t.label for t in said if t.task == "language"]
        assert phases[0] == "reach the cube" and {"grasp it with the right arm", "hand it to the left arm"} <= set(phases)
        assert said[1].label.startswith(f"cube on the table, {r.place}")
        answers = [t for t in r.texts if t.task == ASK_TASK]
        assert len(answers) == 2 and all(t.label in ("neither arm", "the right arm") or t.label.startswith(("on the table", "in the"))
                                         for t in answers)  # fmt: skip
        # the first while the cube stands where it started, the second while an arm holds it
        assert answers[0].label in ("neither arm", f"on the table, {r.place}")
        assert answers[1].label in ("the right arm", "in the right gripper"), answers[1]
    summary = summarize(results, runtime, settings)
    assert summary["success_rate"] == 1.0 and summary["text_outputs"]["language"] == 27


def test_a_broken_gripper_conversion_fails_the_transfer(tmp_path) -> None:
    """The loop executes the file's output conversions: the right gripper's open and closed swapped, no hand-over."""
    text = PARAMS.read_text().replace('output_conversions: ["6x identity", aloha_gripper_joint, "6x identity", aloha_gripper_joint]',
                                      'output_conversions: ["6x identity", aloha_gripper_joint, "6x identity", "linear(-2.1123, 1.491)"]')  # fmt: skip
    broken = tmp_path / "config" / "broken.yaml"
    broken.parent.mkdir()
    broken.write_text(text)
    with small_checkpoint() as overrides:
        params = load_params(broken, overrides)
        runtime, _, running = expert_as_model(eval_config(params.config, engine_mode="action_only"))
        (spec,) = episode_specs(params.wiring, 0, 1, on_start=running)
        result = run_episode(runtime, spec, params.settings)
    assert not result.success and result.duration_s == pytest.approx(8.0)  # 400 steps


def test_wiring_that_does_not_fit_the_drivers_is_refused(tmp_path) -> None:
    with small_checkpoint() as overrides:
        params = load_params(PARAMS, overrides)
    bad = AlohaEpisodeSpec(0, AlohaWiring(("left_waist", "left_elbow_typo"), params.wiring.outputs))
    with pytest.raises(ValueError, match="left_elbow_typo"):
        bad.make_episode(0.02, 8.0)


def _small_params(tmp_path: Path, overrides: dict[str, str]) -> Path:
    """aloha_demo.yaml with the small checkpoint in place of models/aloha, without its limits block (a random
    checkpoint's grippers leave their range: with the limits every chunk would hold; test_safety_physics.py runs
    the limits)."""
    params_file = tmp_path / "config" / "small.yaml"
    params_file.parent.mkdir(exist_ok=True)
    text = PARAMS.read_text()
    text = text[: text.index("    # ----------------------------------------------------------------------- limits")]
    params_file.write_text(text.replace("checkpoint: models/aloha", f"checkpoint: {overrides['checkpoint']}")
                           .replace("tokenizer: models/aloha/tokenizer.model", f"tokenizer: {overrides['tokenizer']}"))  # fmt: skip
    return params_file


def _cli(capsys, *args: str) -> dict:
    assert cli.main(["eval", "--env", "aloha_transfer_cube", "--quiet", *args]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_a_small_random_checkpoint_end_to_end_and_envs_equal_one_by_one(tmp_path, capsys) -> None:
    """The CLI on a random ALOHA-shaped checkpoint: the table-top eval's keys, a GIF; two environments at once
    give the outcomes and chunks of one by one."""
    with small_checkpoint(seed=1) as overrides:
        params_file = _small_params(tmp_path, overrides)
        common = ["--params-file", str(params_file), "--episodes", "3", "--seed", "5", "--time-limit", "1.2", "--questions", "1"]
        one = _cli(capsys, *common, "--gif", str(tmp_path / "episode.gif"), "--json-out", str(tmp_path / "one.json"))
        two = _cli(capsys, *common, "--envs", "2", "--json-out", str(tmp_path / "two.json"))
    for key in ("success_rate", "narration_accuracy", "memory_accuracy", "answer_accuracy", "wall_s_per_episode"):
        assert key in one and key in two
    assert one["episodes"] == 3 and one["chunks"] == 3 * 3  # 60 steps: chunks at steps 0, 25, 50
    assert one["text_outputs"] == {"language": 9, "memory": 6, "ask": 3}  # every frame's texts finish before the next chunk (memory: every 2nd)
    assert set(one["answers_by_kind"]) <= set(scene_texts.vocabulary())  # per true answer
    assert (tmp_path / "episode.gif").stat().st_size > 0
    a, b = (json.loads((tmp_path / f"{n}.json").read_text())["episodes"] for n in ("one", "two"))
    assert [(e["seed"], e["success"], e["chunks"]) for e in a] == [(e["seed"], e["success"], e["chunks"]) for e in b]
    said = lambda eps: {(e["seed"], t["frame_seq"], t["task"], t["text"]) for e in eps for t in e["texts"]}  # noqa: E731
    assert said(a) == said(b)


def test_the_default_file_without_its_checkpoint_fails_in_one_line(capsys) -> None:
    if (PARAMS.parents[1] / "models" / "aloha").exists():
        pytest.skip("models/aloha is there (this checks the error without that model)")
    assert cli.main(["eval", "--env", "aloha_transfer_cube", "--episodes", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "models/aloha does not exist" in err[0] and "oxygen-train-demo" in err[0]


def test_runtime_image_size_and_state_reach_the_model() -> None:
    """Frames carry the three cameras at the file's camera size (what the simulator node sends; the runtime resizes
    them to the model's) and the file's joint state in driver units."""
    with small_checkpoint() as overrides:
        params = load_params(PARAMS, overrides)
        runtime = PolicyRuntime.load(eval_config(params.config, engine_mode="action_only"))
    (spec,) = episode_specs(params.wiring, 2, 1)
    episode = spec.make_episode(0.02, 8.0)
    images = episode.images(runtime.image_size)
    assert runtime.image_size != 96 and params.wiring.camera_size == (96, 96)
    assert len(images) == 3 and all(im.shape == (96, 96, 3) for im in images)
    state = episode.state
    assert state.shape == (14,) and 0.018 < state[6] < 0.06 and np.allclose(state[:6], [0, -0.96, 1.16, 0, -0.3, 0], atol=0.02)


def test_through_node_runs_the_same_file_over_dds(tmp_path, capsys) -> None:
    """--through-node: oxygen_node and the simulator node over DDS on the same file, its cameras at the file's size."""
    with small_checkpoint() as overrides:
        params_file = _small_params(tmp_path, overrides)
        out = _cli(capsys, "--params-file", str(params_file), "--through-node", "--episodes", "1", "--fast-render", "--timeout", "300")
    assert out["episodes"] == 1 and out["mean_episode_steps"] == 400 and out["query_every_steps"] == 25
    assert out["queries"] == out["chunks"] == 16 and out["lockstep_timeouts"] == 0 and out["rejected_commands"] == 0
