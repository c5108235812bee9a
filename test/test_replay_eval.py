"""oxygen-replay eval: a bag whose commands are the node's own (written by the offline replay with the same
parameters and seed) scores zero on the executed steps; a config with one conversion broken fails its threshold
naming that dimension; CompressedImage cameras give the same numbers; bad bags get one error line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from oxygen_ros.replay.bagio import COMPRESSED_IMAGE, IMAGE, JOINT_STATE, JOINT_TRAJECTORY, STRING, BagReader, BagWriter
from oxygen_ros.replay.cli import main
from oxygen_ros.replay.config import load_replay_config
from oxygen_ros.replay.offline import replay_offline
from oxygen_ros.replay.robot_bag import encode_image
from oxygen_ros.replay.scene import scene_for_config, write_demo_bag

NS = 1_000_000_000
ARM, GRIPPER = "/arm_controller/joint_trajectory", "/gripper_controller/commands"
PARAMS = """
oxygen_node:
  ros__parameters:
    model_preset: tiny
    denoise_steps: 2
    seed: 3
    engine_mode: action_only
    task_names: []
    task_prompts: []
    task_every_n_frames: []
    task_max_tokens: []
    camera_topics: ["/camera/base/image_raw", "/camera/wrist/image_raw"]
    joint_state_topic: /joint_states
    joint_names: [j1, j2, j3, j4, j5, j6, j7]
    default_instruction: "pick up the red cup"
    control_rate_hz: 5.0
    max_observation_age_s: 0.5
    output_names: [arm, gripper]
    output_types: [joint_trajectory, float64_array]
    output_topics: [/arm_controller/joint_trajectory, /gripper_controller/commands]
    output_dims: ["0..6", "7"]
    output_joints: ["j1,j2,j3,j4,j5,j6,j7", gripper]
    output_conversions: [{arm}, "{gripper}"]
"""
GOOD = {"arm": '"7x identity"', "gripper": "linear(2.0, 0.5)"}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def params(folder: Path, name: str, **conversions: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(PARAMS.format(**{**GOOD, **conversions}))
    return path


def rewrite(src: Path, dst: Path, change: Callable[[str, str, int, Any], list[tuple[str, str, int, Any]]]) -> Path:
    """Copy a bag message by message through ``change`` (which returns the messages to write instead)."""
    with BagReader(src) as reader, BagWriter(dst, overwrite=True) as writer:
        for m in reader.messages():
            for topic, msgtype, at, msg in change(m.topic, m.msgtype, m.timestamp_ns, reader.deserialize(m)):
                writer.write(topic, msgtype, at, msg)
    return dst


def keep(topic: str, msgtype: str, at: int, msg: Any) -> list[tuple[str, str, int, Any]]:
    return [(topic, msgtype, at, msg)]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A demo scene plus, as its recorded commands, what the offline replay of the same parameters sent."""
    folder = tmp_path_factory.mktemp("eval")
    good = params(folder, "good")
    cfg = load_replay_config(good)
    scene_bag = folder / "scene.mcap"
    write_demo_bag(scene_bag, scene_for_config(cfg, duration_s=2.6, camera_rate_hz=10.0, joint_rate_hz=25.0,
                                               image_width=32, image_height=24))  # fmt: skip
    replayed = folder / "replayed.mcap"
    replay_offline(scene_bag, replayed, cfg)
    bag = folder / "recorded.mcap"
    with BagReader(replayed) as reader:
        commands = [(m.topic, m.msgtype, m.timestamp_ns, m.rawdata) for m in reader.messages([ARM, GRIPPER])]
    with BagReader(scene_bag) as reader, BagWriter(bag) as writer:
        merged = sorted([(m.topic, m.msgtype, m.timestamp_ns, m.rawdata) for m in reader.messages()] + commands,
                        key=lambda m: m[2])  # fmt: skip
        for topic, msgtype, at, raw in merged:
            writer.write(topic, msgtype, at, raw)
    return SimpleNamespace(dir=folder, good=good, bag=bag, commands=commands)


def run_eval(capsys: pytest.CaptureFixture[str], bag: Path, params_file: Path, *extra: str) -> tuple[int, dict, str]:
    code = main(["eval", str(bag), "--params-file", str(params_file), "-q", "--no-plots", "--seed", "3",
                 "--out", str(bag.parent / f"{bag.stem}_{params_file.stem}_eval"), *extra])  # fmt: skip
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    return code, json.loads(lines[-1]) if code != 2 else {}, captured.err


def test_the_nodes_own_commands_score_zero_on_the_executed_steps(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    assert {t for t, *_ in env.commands} == {ARM, GRIPPER}
    code, summary, err = run_eval(capsys, env.bag, env.good, "--max-mae", "1e-9", "--max-rmse", "1e-9")
    assert code == 0, err
    assert summary["against"] == "commands" and summary["passed"] and summary["ticks"] == summary["chunks"] == 14  # 0 .. 2.6 s at 5 Hz
    assert list(summary["dims"]) == ["j1", "j2", "j3", "j4", "j5", "j6", "j7", "gripper"]
    for dim, row in summary["dims"].items():
        assert row["executed"]["mae"] == 0.0 and row["executed"]["compared"] == 14, dim  # one step a tick, each exact
        assert row["mae"] > 0.0  # later steps meet the later chunks' commands
        assert len(row["mae_by_step"]) == 10 and row["mae_by_step"][0] == 0.0
    assert summary["dims"]["gripper"]["gripper"]["agreement"] is not None
    ticks = (env.bag.parent / f"{env.bag.stem}_good_eval" / "ticks.csv").read_text().splitlines()
    assert ticks[0].startswith("episode,tick,time_s,dim,mae") and len(ticks) == 1 + 14 * 8
    steps = (env.bag.parent / f"{env.bag.stem}_good_eval" / "steps.csv").read_text().splitlines()
    assert steps[0] == "step,dim,mae,rmse,max,compared" and steps[1] == "1,j1,0,0,0,14" and len(steps) == 1 + 10 * 8


@pytest.mark.parametrize("broken, dim", [({"arm": '"identity; linear(-1.0, 0.0); 5x identity"'}, "j2"),
                                         ({"gripper": "linear(1.0, 0.0)"}, "gripper")])  # fmt: skip
def test_a_broken_conversion_fails_the_threshold_and_is_named(env: SimpleNamespace, capsys: pytest.CaptureFixture[str],
                                                              broken: dict[str, str], dim: str) -> None:  # fmt: skip
    code, summary, err = run_eval(capsys, env.bag, params(env.dir, f"broken_{dim}", **broken), "--max-mae", "1e-6")
    assert code == 1
    line = [x for x in err.splitlines() if "eval failed" in x]
    assert len(line) == 1 and line[0].split("eval failed: ")[1].startswith(f"{dim}: executed steps MAE"), err
    assert "worst tick" in line[0]
    assert [f.split(":")[0] for f in summary["failures"]] == [dim]  # the other dimensions still score zero


def test_compare_says_which_config_is_closer(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    broken = params(env.dir, "flipped", arm='"identity; linear(-1.0, 0.0); 5x identity"')
    code, summary, err = run_eval(capsys, env.bag, env.good, "--compare", str(broken))
    assert code == 0, err
    cmp = summary["compare"]
    assert cmp["dims"]["j2"]["better"] == "a" and cmp["dims"]["j1"]["better"] == "tie" and cmp["closer"] == "a"
    assert cmp["b"]["seed"] == summary["seed"] == 3


def test_compressed_cameras_evaluate_the_same(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    def compress(topic: str, msgtype: str, at: int, msg: Any) -> list:
        if msgtype != IMAGE:
            return keep(topic, msgtype, at, msg)
        from oxygen_ros.replay.bagio import _default_typestore

        ts = _default_typestore()
        rgb = np.asarray(msg.data, dtype=np.uint8).reshape(msg.height, msg.width, 3)
        data = np.frombuffer(encode_image(rgb, "png"), dtype=np.uint8)
        return [(topic, COMPRESSED_IMAGE, at, ts.types[COMPRESSED_IMAGE](header=msg.header, format="png", data=data))]

    png = rewrite(env.bag, env.dir / "png.mcap", compress)
    _, plain, _ = run_eval(capsys, env.bag, env.good)
    code, compressed, err = run_eval(capsys, png, env.good)
    assert code == 0, err
    assert compressed["dims"] == plain["dims"]


def test_against_states_compares_joint_positions(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    state_params = env.dir / "states.yaml"
    state_params.write_text(env.good.read_text().replace('"j1,j2,j3,j4,j5,j6,j7", gripper', '"j1,j2,j3,j4,j5,j6,j7", j1'))
    code, summary, err = run_eval(capsys, env.bag, state_params, "--against", "states")
    assert code == 0, err
    assert summary["against"] == "states" and summary["dims"]["j1"]["compared"] > 0


def _drop(name: str) -> Callable:
    return lambda topic, msgtype, at, msg: [] if topic == name else keep(topic, msgtype, at, msg)


def _as_string(topic: str, msgtype: str, at: int, msg: Any) -> list:
    if topic != ARM:
        return keep(topic, msgtype, at, msg)
    from oxygen_ros.replay.bagio import _default_typestore

    return [(topic, STRING, at, _default_typestore().types[STRING](data="not a trajectory"))]


def _short(topic: str, msgtype: str, at: int, msg: Any, start: list[int] = []) -> list:  # noqa: B006 - the first time seen
    start.append(at) if not start else None
    return keep(topic, msgtype, at, msg) if at < start[0] + NS else []


def _jump(topic: str, msgtype: str, at: int, msg: Any, start: list[int] = []) -> list:  # noqa: B006
    start.append(at) if not start else None
    if msgtype == JOINT_STATE and at > start[0] + 1.2 * NS:
        msg.header.stamp.sec += 10
    return keep(topic, msgtype, at, msg)


def _rename_joint(topic: str, msgtype: str, at: int, msg: Any) -> list:
    if msgtype == JOINT_STATE:
        msg.name = ["jx" if n == "j3" else n for n in msg.name]
    return keep(topic, msgtype, at, msg)


@pytest.mark.parametrize("name, change, fragments", [
    ("no_camera", _drop("/camera/wrist/image_raw"), ["camera topic /camera/wrist/image_raw is not in the bag"]),
    ("no_joint_states", _drop("/joint_states"), ["joint state topic /joint_states is not in the bag"]),
    ("string_commands", _as_string, [f"{ARM} has type {STRING}, expected {JOINT_TRAJECTORY}", "--against states"]),
    ("no_gripper_commands", _drop(GRIPPER), [f"{GRIPPER} is not in the bag"]),
    ("short", _short, ["shorter than one chunk (10 steps of 0.2 s = 2.00 s)"]),
    ("clock_jump", _jump, ["the clock jumps at 1.2", "+10.000 s off its recorded time"]),
    ("renamed_joint", _rename_joint, ["lack the configured joints ['j3']"]),
])  # fmt: skip
def test_bad_bags_get_one_clear_error(env: SimpleNamespace, capsys: pytest.CaptureFixture[str], name: str,
                                      change: Callable, fragments: list[str]) -> None:  # fmt: skip
    bag = rewrite(env.bag, env.dir / f"{name}.mcap", change)
    against = ["--against", "commands"] if name == "no_gripper_commands" else []
    code, _, err = run_eval(capsys, bag, env.good, *against)
    assert code == 2
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("oxygen-replay: error: ") and str(bag) in lines[0], err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_bad_thresholds_are_refused(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_eval(capsys, env.bag, env.good, "--max-mae", "j1=lots")
    assert code == 2 and "--max-mae 'j1=lots'" in err


def test_reference_values_at_the_instants_actions_belong_to() -> None:
    from oxygen_ros.replay.episodes import Episode
    from oxygen_ros.replay.recorded import Reference, Timeline

    step = 20_000_000
    sent = np.arange(5, dtype=np.int64) * step  # one message a step, value k at step k
    targets = sent + step  # action i of a chunk at 0 belongs to (i + 1) steps
    trajectory = Timeline("trajectory", sent, [np.array([[float(k)]]) for k in range(5)], [np.array([t + step]) for t in sent])
    assert trajectory.at(targets, step)[:, 0].tolist() == [0, 1, 2, 3, 4]  # the point for T, sent a step before it
    assert np.isnan(trajectory.at(np.array([7 * step]), step)[0, 0])  # past the recording
    hold = Timeline("hold", sent, [np.array([float(k)]) for k in range(5)])
    assert hold.at(targets, step)[:, 0].tolist() == [0, 1, 2, 3, 4]  # a streamed row goes out one step early
    assert np.isnan(hold.at(np.array([20 * step]), step)[0, 0])  # a command older than the hold limit
    state = Timeline("state", sent, [np.array([float(k)]) for k in range(5)])
    np.testing.assert_allclose(state.at(np.array([step // 2, 3 * step]), step)[:, 0], [0.5, 3.0])  # achieved: between
    assert np.isnan(state.at(np.array([5 * step]), step)[0, 0])
    first = Episode(0, 0, 3 * step - 1, "topic")
    values = Reference("commands", [hold], np.array([0, 3 * step]), ()).values(targets, step, first)[:, 0]
    assert values[:2].tolist() == [0, 1] and np.isnan(values[2:]).all()  # not across the next episode's start


def test_limits_by_dimension_output_and_pattern() -> None:
    from oxygen_ros.replay.metrics import limit_for, parse_limits

    limits = parse_limits(["0.1", "*gripper=0.3", "left_arm=0.05", "left_waist=0.01"], "--max-mae")
    assert limits == {"*": 0.1, "*gripper": 0.3, "left_arm": 0.05, "left_waist": 0.01}
    assert limit_for("left_waist", "left_arm", limits) == 0.01
    assert limit_for("left_elbow", "left_arm", limits) == 0.05
    assert limit_for("right_gripper", "right_gripper", limits) == 0.3
    assert limit_for("right_elbow", "right_arm", limits) == 0.1
    with pytest.raises(ValueError, match="--max-rmse '=1'"):
        parse_limits(["=1"], "--max-rmse")


def test_remap_names_recorded_topics_as_configured(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    renamed = rewrite(env.bag, env.dir / "renamed.mcap", lambda t, m, at, msg: [("/recorded/arm" if t == ARM else t, m, at, msg)])
    code, summary, err = run_eval(capsys, renamed, env.good, "--remap", f"/recorded/arm:={ARM}", "--max-mae", "1e-9")
    assert code == 0 and summary["against"] == "commands", err
