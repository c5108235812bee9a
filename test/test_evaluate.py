"""Closed-loop evaluation drives the runtime as the node does, reproducibly (tiny random-weight model)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from oxygen_ros.runtime import PolicyRuntime, RuntimeConfig
from oxygen_ros.sim import cli
from oxygen_ros.sim.episode import EpisodeSpec
from oxygen_ros.sim.evaluate import EvalSettings, TextRecord, eval_specs, run_episode, summarize

SHORT = EvalSettings(time_limit_s=1.6)  # 8 ticks


def tiny_runtime(mode: str = "oxygen") -> PolicyRuntime:
    return PolicyRuntime.load(RuntimeConfig(model_preset="tiny", engine_mode=mode, tokens_per_frame=3, num_threads=1))


@pytest.fixture(scope="module")
def oxygen() -> PolicyRuntime:
    return tiny_runtime()


def test_an_episode_is_reproducible_and_reports_timing_metrics(oxygen: PolicyRuntime) -> None:
    spec = eval_specs(3, 1)[0]
    a = run_episode(oxygen, spec, SHORT)
    b = run_episode(oxygen, spec, SHORT)
    assert a.chunks == b.chunks == 8
    assert all(np.array_equal(x, y) for x, y in zip(a.actions, b.actions))
    assert [(t.task, t.text) for t in a.texts] == [(t.task, t.text) for t in b.texts]
    assert len(a.switch_jumps) == 7 and a.jerk_rms > 0 and a.jerk_rms == b.jerk_rms
    assert {t.task for t in a.texts} == {"language", "memory"}
    labels = {t.label for t in a.texts if t.task == "language"}
    target = spec.target_name
    assert labels <= {f"move to the {target}", f"grasp the {target}", f"lift the {target}"}
    other = run_episode(oxygen, eval_specs(4, 1)[0], SHORT)
    assert not np.array_equal(other.actions[0], a.actions[0])  # another seed, other noise and images


def test_oxygen_and_sequential_give_identical_actions_and_text(oxygen: PolicyRuntime) -> None:
    sequential = tiny_runtime("sequential")
    for spec in eval_specs(10, 2):
        a, b = run_episode(oxygen, spec, SHORT), run_episode(sequential, spec, SHORT)
        assert len(a.actions) == len(b.actions)
        assert all(np.array_equal(x, y) for x, y in zip(a.actions, b.actions))
        # oxygen finishes a frame's text a few ticks later; what is said about each frame is the same
        finished_a = {(t.frame_seq - a.texts[0].frame_seq, t.task, t.text) for t in a.texts}
        finished_b = {(t.frame_seq - b.texts[0].frame_seq, t.task, t.text) for t in b.texts}
        assert finished_a and finished_a <= finished_b


def test_latency_and_observation_stamps_change_when_chunks_take_over(oxygen: PolicyRuntime) -> None:
    spec = eval_specs(3, 1)[0]
    base = run_episode(oxygen, spec, SHORT)
    late = run_episode(oxygen, spec, EvalSettings(time_limit_s=1.6, latency_s=0.1, time_alignment="stamp"))
    assert late.chunks == base.chunks and not late.rejected
    assert not np.allclose(late.jerk_rms, base.jerk_rms)


def test_any_instruction_text_runs_and_absent_objects_fail(oxygen: PolicyRuntime) -> None:
    for text in ["pick up the purple cup", "☃ dance ☃", "x" * 5000, ""]:
        result = run_episode(oxygen, EpisodeSpec.with_instruction(5, text), SHORT)
        assert not result.success
        assert all(t.label is None for t in result.texts)  # nothing to be right about
    absent = run_episode(oxygen, EpisodeSpec.with_instruction(5, "pick up the purple cup"), SHORT)
    summary = summarize([absent], oxygen, SHORT)  # a name of no known object: neither a target nor an absent one
    assert absent.place is None and summary["success_by_place"] == {} and summary["success_by_target"] == {}
    assert summary["absent"] == {"episodes": 0, "nothing_lifted": 0}
    refused = run_episode(oxygen, EpisodeSpec.with_instruction(5, ""), SHORT)
    assert refused.skipped_ticks == 8 and refused.chunks == 0  # empty instruction: no chunk, as in the node


def test_summary_counts_only_labelled_finished_outputs(oxygen: PolicyRuntime) -> None:
    result = run_episode(oxygen, eval_specs(3, 1)[0], SHORT)
    result.texts = [TextRecord("language", " Move to the red cup", "move to the red cup", 0),
                    TextRecord("language", "lift", "grasp the red cup", 1),
                    TextRecord("language", "anything", None, 2),
                    TextRecord("memory", "red cup left of the blue ball", "red cup left of the blue ball", 3)]  # fmt: skip
    summary = summarize([result], oxygen, SHORT)
    assert summary["narration_accuracy"] == 0.5 and summary["memory_accuracy"] == 1.0
    assert summary["episodes"] == 1 and summary["chunks"] == 8 and summary["success_rate"] == 0.0
    # Successes out of episodes per named object and per its starting place.
    won = dataclasses.replace(result, success=True)
    other = run_episode(oxygen, eval_specs(4, 1)[0], SHORT)
    summary = summarize([result, won, other], oxygen, SHORT)
    by_target = {result.spec.target_name: [1, 2]} | {other.spec.target_name: [0, 1]}
    assert result.spec.target_name != other.spec.target_name and summary["success_by_target"] == by_target
    assert summary["success_by_place"][result.place][0] == 1 and summary["success_by_place"][other.place][1] >= 1


def test_cli_prints_one_json_line_last(tmp_path, capsys) -> None:  # noqa: ANN001
    params = tmp_path / "tiny.yaml"
    params.write_text(
        "/**:\n  ros__parameters:\n    model_preset: tiny\n    num_threads: 1\n    control_rate_hz: 5.0\n"
        "    joint_names: [arm_yaw, arm_shoulder, arm_elbow, gripper]\n"
        "    joint_limits_lower: [-1.6, -0.4, -2.8, 0.0]\n    joint_limits_upper: [1.6, 1.6, 0.0, 0.08]\n"
    )
    out = tmp_path / "episodes.json"
    code = cli.main(["eval", "--episodes", "2", "--seed", "5", "--params-file", str(params), "--time-limit", "0.8",
                     "--quiet", "--json-out", str(out)])  # fmt: skip
    assert code == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads(last)
    for key in ("success_rate", "mean_time_to_success_s", "narration_accuracy", "memory_accuracy", "chunks", "episodes"):
        assert key in summary
    assert summary["episodes"] == 2 and summary["chunks"] == 8 and summary["tokens_per_frame"] == 4
    targets = [s.target_name for s in eval_specs(5, 2)]
    details = json.loads(out.read_text())["episodes"]
    assert [e["seed"] for e in details] == [5, 6] and [e["target"] for e in details] == targets
    # Per named object and per its place: every episode counted once.
    assert set(summary["success_by_target"]) == set(targets)
    assert sum(n for _, n in summary["success_by_place"].values()) == 2
    assert set(summary["success_by_place"]) <= {f"{r} {s}" for r in ("near", "far") for s in ("left", "centre", "right")}
    assert cli.main(["eval", "--seed", "999999", "--episodes", "5", "--params-file", str(params), "--quiet"]) == 2
    # The execution horizon from the command line: a new chunk every second tick halves the chunks.
    capsys.readouterr()
    code = cli.main(["eval", "--episodes", "2", "--seed", "5", "--params-file", str(params), "--time-limit", "0.8",
                     "--quiet", "--replan", "n_action_steps", "--n-action-steps", "2"])  # fmt: skip
    assert code == 0 and json.loads(capsys.readouterr().out.strip().splitlines()[-1])["chunks"] == 4
    assert cli.main(["eval", "--episodes", "1", "--params-file", str(params), "--quiet", "--n-action-steps", "-1"]) == 2
