"""Bag tools without DDS: the demo bag, deterministic offline replay into an output bag, damaged and
mismatched bags, and the `oxygen-replay` command's exit codes.

The policy is the tiny preset (random weights): the tests check timing, shapes, completeness and
reproducibility of the outputs, not their meaning.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from oxygen_ros.replay.bagio import (
    ACTION_CHUNK, IMAGE, JOINT_STATE, JOINT_TRAJECTORY, STRING, TEXT_DELTA, BagError, BagReader, BagWriter,
    parse_remaps, string_msg,
)  # fmt: skip
from oxygen_ros.replay.cli import main
from oxygen_ros.replay.config import ParamsFileError, load_replay_config
from oxygen_ros.replay.offline import OfflineOptions, ReplayError, replay_offline
from oxygen_ros.replay.scene import DemoScene, SceneConfig, scene_for_config, write_demo_bag
from oxygen_ros.interface.convert import FINISH_REASONS, image_to_array, stamp_to_ns

NS = 1_000_000_000
PARAMS = """
oxygen_node:
  ros__parameters:
    use_sim_time: true
    model_preset: tiny
    denoise_steps: 3
    task_names: [language, memory]
    task_prompts: [" Subtask:", " Memory:"]
    task_every_n_frames: [1, 3]
    task_max_tokens: [5, 7]
    tokens_per_frame: 2
    camera_topics: ["/camera/base/image_raw", "", "/camera/wrist/image_raw"]
    camera_optional: [false, true, true]
    joint_state_topic: /joint_states
    joint_names: [j1, j2, j3, j4, j5, j6, j7]
    instruction_topic: ~/instruction
    default_instruction: "pick up the red cup"
    control_rate_hz: 5.0
    max_observation_age_s: 0.5
    resume_blend_s: 0.0  # the trajectories as the chunks say (no blend from the measured joints at the start)
"""
TICKS = 6  # a 1.0 s bag at 5 Hz: ticks at 0, 0.2, ..., 1.0 s


def messages(path: Path) -> list[tuple[str, str, int, bytes]]:
    with BagReader(path) as reader:
        return [(m.topic, m.msgtype, m.timestamp_ns, m.rawdata) for m in reader.messages()]


def decoded(path: Path) -> dict[str, list[tuple[int, object]]]:
    out: dict[str, list[tuple[int, object]]] = defaultdict(list)
    with BagReader(path) as reader:
        for m in reader.messages():
            out[m.topic].append((m.timestamp_ns, reader.deserialize(m)))
    return out


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # a replay went from 0.5 s to 4 s with more threads


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    folder = tmp_path_factory.mktemp("replay")
    params = folder / "params.yaml"
    params.write_text(PARAMS)
    cfg = load_replay_config(params)
    bag = folder / "demo.mcap"
    scene = scene_for_config(cfg, duration_s=1.0, camera_rate_hz=10.0, joint_rate_hz=25.0, image_width=48, image_height=36)
    info = write_demo_bag(bag, scene)
    return SimpleNamespace(dir=folder, params=params, cfg=cfg, bag=bag, scene=scene, info=info)


@pytest.fixture(scope="module")
def replay(env: SimpleNamespace) -> SimpleNamespace:
    out = env.dir / "out.mcap"
    summary = replay_offline(env.bag, out, env.cfg)
    return SimpleNamespace(out=out, summary=summary, topics=decoded(out))


# ------------------------------------------------------------------------------------------ demo bag
def test_demo_bag_is_deterministic_real_bag_in_both_storages(env: SimpleNamespace) -> None:
    db3 = env.dir / "demo_again.db3"
    write_demo_bag(db3, env.scene)
    assert messages(db3) == messages(env.bag)  # same scene → the same bytes, whatever the storage

    with BagReader(env.bag) as reader:
        topics = {t: (i.msgtype, i.count) for t, i in reader.topics.items()}
        assert topics == {
            "/camera/base/image_raw": (IMAGE, 11),
            "/camera/wrist/image_raw": (IMAGE, 11),
            "/joint_states": (JOINT_STATE, 26),
            "/oxygen_node/instruction": (STRING, 1),
        }
        t0 = reader.start_ns
        for m in reader.messages():
            msg = reader.deserialize(m)
            if m.msgtype == IMAGE:
                assert stamp_to_ns(msg.header.stamp) == m.timestamp_ns  # header stamps are the recorded times
                assert image_to_array(msg).shape == (36, 48, 3)
                assert (m.timestamp_ns - t0) % (NS // 10) == 0
            elif m.msgtype == JOINT_STATE:
                assert list(msg.name) == ["j1", "j2", "j3", "j4", "j5", "j6", "j7"] and len(msg.effort) == 7
            elif m.msgtype == STRING:
                assert msg.data == "pick up the red cup" and m.timestamp_ns == t0

    other = DemoScene(SceneConfig(seed=1, image_width=48, image_height=36))
    assert not np.array_equal(other.image(0, 0.5, 5), DemoScene(env.scene).image(0, 0.5, 5))
    q0, _ = DemoScene(env.scene).joints(0.0)
    q1, _ = DemoScene(env.scene).joints(0.04)
    assert np.all(np.abs(q1 - q0) < 0.1)  # smooth motion


def test_scene_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="duration"):
        SceneConfig(duration_s=0).validate()
    with pytest.raises(ValueError, match="camera topic"):
        SceneConfig(camera_topics=["", ""]).validate()


# ------------------------------------------------------------------------------------ offline replay
def test_offline_replay_writes_a_chunk_per_tick_at_recorded_times(env: SimpleNamespace, replay: SimpleNamespace) -> None:
    s = replay.summary
    t0 = env.info["start_ns"]
    assert (s["ticks"], s["frames"], s["chunks"], s["trajectories"]) == (TICKS, TICKS, TICKS, TICKS)
    assert s["skipped"] == {} and s["warnings"] == [] and not s["truncated"]

    with BagReader(replay.out) as reader:
        types = {topic: info.msgtype for topic, info in reader.topics.items()}
    assert types == {
        "/oxygen_node/action_chunk": ACTION_CHUNK,
        "/joint_trajectory_controller/joint_trajectory": JOINT_TRAJECTORY,
        "/oxygen_node/text/language": TEXT_DELTA,
        "/oxygen_node/text/language/final": STRING,
        "/oxygen_node/text/memory": TEXT_DELTA,
        "/oxygen_node/text/memory/final": STRING,
    }
    chunks = replay.topics["/oxygen_node/action_chunk"]
    expected_times = [t0 + n * NS // 5 for n in range(TICKS)]
    assert [t for t, _ in chunks] == expected_times
    for n, (t, c) in enumerate(chunks):
        assert stamp_to_ns(c.header.stamp) == t  # the camera frame taken at the tick (10 Hz images, 5 Hz ticks)
        assert c.header.frame_id == "base"
        assert c.frame_seq == n and c.horizon == 10 and c.action_dim == 8
        assert list(c.joint_names) == ["j1", "j2", "j3", "j4", "j5", "j6", "j7"]
        assert c.data.shape == (80,) and np.all(np.isfinite(c.data))
        assert stamp_to_ns(c.step_period) == NS // 5
        assert c.engine_mode == "oxygen" and c.prefill_latency_s == 0.0 and c.action_latency_s == 0.0
        assert c.latency_s == 0.0 and c.n_action_steps == 10  # the camera frame of the tick itself

    trajectories = replay.topics["/joint_trajectory_controller/joint_trajectory"]
    assert [t for t, _ in trajectories] == expected_times
    for (_, traj), (_, chunk) in zip(trajectories, chunks):
        # time_alignment 'stamp': timed from the observation (the tick here: its age is the chunk's latency)
        assert stamp_to_ns(traj.header.stamp) == stamp_to_ns(chunk.header.stamp)
        starts = [stamp_to_ns(p.time_from_start) for p in traj.points]
        assert starts == [(k + 1) * NS // 5 for k in range(10)]
        np.testing.assert_allclose(traj.points[0].positions, chunk.data[:7], rtol=1e-6)


def test_offline_replay_text_streams_are_complete(env: SimpleNamespace, replay: SimpleNamespace) -> None:
    chunk_stamps = {stamp_to_ns(c.header.stamp) for _, c in replay.topics["/oxygen_node/action_chunk"]}
    for task, max_tokens, requests in (("language", 5, TICKS), ("memory", 7, 2)):
        deltas: dict[int, list] = defaultdict(list)
        for _, d in replay.topics[f"/oxygen_node/text/{task}"]:
            assert d.task == task
            deltas[d.request_id].append(d)
        finals = [m.data for _, m in replay.topics[f"/oxygen_node/text/{task}/final"]]
        assert len(deltas) == requests == len(finals)
        texts = []
        for stream in deltas.values():
            assert [d.seq for d in stream] == list(range(len(stream)))
            assert [d.final for d in stream] == [False] * (len(stream) - 1) + [True]
            assert stream[-1].finish_reason in FINISH_REASONS - {"cancelled"}  # drained, not cut
            assert sum(len(d.token_ids) for d in stream) <= max_tokens
            assert stamp_to_ns(stream[0].source_stamp) in chunk_stamps
            texts.append("".join(d.text for d in stream))
        assert sorted(texts) == sorted(finals)
        summary = replay.summary["text"][task]
        assert sorted(r["text"] for r in summary) == sorted(finals) and len(summary) == requests
    assert replay.summary["tokens"] == sum(r["tokens"] for rs in replay.summary["text"].values() for r in rs)


def test_offline_replay_is_byte_identical_across_runs_and_storages(env: SimpleNamespace, replay: SimpleNamespace) -> None:
    again = env.dir / "again.db3"
    summary = replay_offline(env.bag, again, env.cfg)
    assert messages(again) == messages(replay.out)
    assert summary["text"] == replay.summary["text"]
    reseeded = env.dir / "reseeded.mcap"
    replay_offline(env.bag, reseeded, env.cfg, OfflineOptions(seed=1))
    first = decoded(reseeded)["/oxygen_node/action_chunk"][0][1]
    assert not np.array_equal(first.data, replay.topics["/oxygen_node/action_chunk"][0][1].data)  # the noise seed matters


def test_offline_replay_reads_compressed_cameras(env: SimpleNamespace) -> None:
    from PIL import Image as PILImage

    bag = env.dir / "compressed.mcap"
    with BagReader(env.bag) as reader, BagWriter(bag) as writer:
        compressed = writer.typestore.types["sensor_msgs/msg/CompressedImage"]
        for m in reader.messages():
            if m.topic != "/camera/base/image_raw":
                writer.write(m.topic, m.msgtype, m.timestamp_ns, m.rawdata)
                continue
            img = reader.deserialize(m)
            buf = io.BytesIO()
            PILImage.fromarray(image_to_array(img)).save(buf, format="JPEG")
            msg = compressed(header=img.header, format="jpeg", data=np.frombuffer(buf.getvalue(), np.uint8))
            writer.write("/camera/base/image_raw/compressed", "sensor_msgs/msg/CompressedImage", m.timestamp_ns, msg)
    cfg = load_replay_config(env.params, overrides={"camera_topics": ["/camera/base/image_raw/compressed", "", ""]})
    summary = replay_offline(bag, env.dir / "compressed_out.mcap", cfg)
    assert summary["chunks"] == summary["ticks"] == TICKS and summary["warnings"] == []
    assert summary["inputs"]["/camera/base/image_raw/compressed"] == 11


# ----------------------------------------------------------------------------------- damaged inputs
def test_truncated_mcap_gives_a_warning_and_the_partial_result(env: SimpleNamespace) -> None:
    big = env.dir / "big.mcap"
    # ~2 MB of images: more than one 1 MiB MCAP chunk, so a cut leaves whole chunks to salvage.
    write_demo_bag(big, scene_for_config(env.cfg, duration_s=1.0, image_width=220, image_height=160))
    cut = env.dir / "cut.mcap"
    data = big.read_bytes()
    cut.write_bytes(data[: int(len(data) * 0.7)])
    summary = replay_offline(cut, env.dir / "cut_out.mcap", env.cfg)
    assert summary["truncated"]
    assert any("damaged" in w and "cut.mcap" in w for w in summary["warnings"])
    assert 0 < summary["chunks"] == summary["ticks"] < TICKS
    assert len(decoded(env.dir / "cut_out.mcap")["/oxygen_node/action_chunk"]) == summary["chunks"]


def test_truncated_db3_and_garbage_give_one_clear_error(env: SimpleNamespace) -> None:
    db3 = env.dir / "whole.db3"
    write_demo_bag(db3, env.scene)
    cut = env.dir / "cut.db3"
    cut.write_bytes(db3.read_bytes()[: db3.stat().st_size // 2])
    garbage = env.dir / "garbage.mcap"
    garbage.write_bytes(b"not a bag at all" * 10)
    for bad in (cut, garbage, env.dir / "missing.mcap"):
        with pytest.raises(BagError, match=bad.name):
            replay_offline(bad, env.dir / "never.mcap", env.cfg)
    assert not (env.dir / "never.mcap").exists()


def test_bag_without_camera_topics_is_a_clear_error_and_remap_fixes_it(env: SimpleNamespace) -> None:
    bag = env.dir / "elsewhere.mcap"
    write_demo_bag(bag, SceneConfig(duration_s=0.4, camera_topics=["/robot/cam"], joint_names=[f"j{i}" for i in range(1, 8)],
                                    instruction_topic="/oxygen_node/instruction", image_width=32, image_height=24))  # fmt: skip
    with pytest.raises(ReplayError, match=r"none of the camera topics.*/robot/cam.*--remap"):
        replay_offline(bag, env.dir / "elsewhere_out.mcap", env.cfg)
    options = OfflineOptions(remap=parse_remaps(["/robot/cam:=/camera/base/image_raw"]))
    summary = replay_offline(bag, env.dir / "elsewhere_out.mcap", env.cfg, options)
    assert summary["chunks"] == summary["ticks"] == 3
    assert summary["inputs"]["/camera/base/image_raw"] == 5
    assert any("/camera/wrist/image_raw is not in the bag" in w for w in summary["warnings"])


def test_wrong_message_type_on_a_camera_topic_masks_the_slot_with_a_warning(env: SimpleNamespace) -> None:
    bag = env.dir / "wrong_type.mcap"
    with BagReader(env.bag) as reader, BagWriter(bag) as writer:
        for m in reader.messages():
            if m.topic == "/camera/base/image_raw":
                writer.write(m.topic, STRING, m.timestamp_ns, string_msg(writer.typestore, "not an image"))
            else:
                writer.write(m.topic, m.msgtype, m.timestamp_ns, m.rawdata)
    summary = replay_offline(bag, env.dir / "wrong_type_out.mcap", env.cfg)
    assert any("/camera/base/image_raw" in w and STRING in w for w in summary["warnings"])
    assert summary["chunks"] == summary["ticks"] == TICKS  # the wrist camera carries on
    chunk = decoded(env.dir / "wrong_type_out.mcap")["/oxygen_node/action_chunk"][0][1]
    assert chunk.header.frame_id == "wrist"


def test_params_file_errors_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("oxygen_node:\n  ros__parameters:\n    control_rate_hz: -1.0\n    joint_names: [a]\n")
    with pytest.raises(ParamsFileError, match="control_rate_hz"):
        load_replay_config(bad)
    with pytest.raises(ParamsFileError, match="does not exist"):
        load_replay_config(tmp_path / "nope.yaml")
    plain = tmp_path / "plain.yaml"
    plain.write_text("joint_names: [a, b]\ncamera_topics: [/cam]\ninstruction_topic: ~/instruction\n")
    cfg = load_replay_config(plain, node="robot/oxygen")
    assert cfg.instruction_topic == "/robot/oxygen/instruction" and cfg.camera_topics == ["/cam"]


# ---------------------------------------------------------------------------------------------- CLI
def _one_error_line(err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("oxygen-replay: error:"), err
    for fragment in fragments:
        assert fragment in lines[0], err
    assert "Traceback" not in err


def test_cli_make_demo_and_offline(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    bag = env.dir / "cli_demo.db3"
    assert main(["make-demo", str(bag), "--params-file", str(env.params), "--duration", "0.4", "--image-size", "32x24", "-q"]) == 0
    assert "cli_demo.db3" in capsys.readouterr().out
    out, summary_file = env.dir / "cli_out", env.dir / "cli_summary.json"
    argv = ["offline", str(bag), "-o", str(out), "--params-file", str(env.params), "--summary", str(summary_file),
            "-p", "engine_mode=sequential", "-q"]  # fmt: skip
    assert main(argv) == 0
    report = capsys.readouterr().out
    assert "3 chunks" in report and "language" in report
    summary = json.loads(summary_file.read_text())
    assert summary["engine_mode"] == "sequential" and summary["chunks"] == 3
    assert (out / "metadata.yaml").is_file()  # a folder output is a rosbag2 folder (mcap inside)
    assert [m[1] for m in messages(out) if m[0] == "/oxygen_node/action_chunk"] == [ACTION_CHUNK] * 3
    assert main(argv) == 2  # the output exists now
    _one_error_line(capsys.readouterr().err, "already exists", "--overwrite")


@pytest.mark.parametrize("case", ["missing", "garbage", "bad_remap", "bad_params", "no_cameras"])
def test_cli_errors_exit_2_with_one_line(env: SimpleNamespace, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    params = ["--params-file", str(env.params)]
    garbage = env.dir / "cli_garbage.db3"
    garbage.write_bytes(b"\0" * 1000)
    bad_params = env.dir / "cli_bad.yaml"
    bad_params.write_text("oxygen_node:\n  ros__parameters:\n    engine_mode: fastest\n    joint_names: [a]\n")
    no_cameras = env.dir / "cli_no_cameras.mcap"
    if not no_cameras.exists():
        with BagWriter(no_cameras) as writer:
            writer.write("/oxygen_node/instruction", STRING, NS, string_msg(writer.typestore, "hello"))
    argv, fragments = {
        "missing": (["offline", str(env.dir / "nope.mcap"), *params], ["nope.mcap", "does not exist"]),
        "garbage": (["offline", str(garbage), *params], ["cli_garbage.db3"]),
        "bad_remap": (["offline", str(env.bag), "--remap", "camera", *params], ["bad remap"]),
        "bad_params": (["offline", str(env.bag), "--params-file", str(bad_params)], ["engine_mode"]),
        "no_cameras": (["offline", str(no_cameras), *params], ["none of the camera topics"]),
    }[case]
    assert main([*argv, "-q"]) == 2
    _one_error_line(capsys.readouterr().err, *fragments)


def test_cli_help_and_a_real_process_error(env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["offline", "--help"], ["play", "--help"], ["make-demo", "--help"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0
    assert "--remap" in capsys.readouterr().out
    garbage = env.dir / "proc_garbage.mcap"
    garbage.write_bytes(b"\x89MCAP0\r\n" + b"\x01" * 50)
    proc = subprocess.run([sys.executable, "-m", "oxygen_ros.replay.cli", "play", str(garbage)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    _one_error_line(proc.stderr, "proc_garbage.mcap")


def test_offline_replay_writes_every_output_into_the_bag(env: SimpleNamespace, tmp_path: Path) -> None:
    """Each controller output gets its own topic and message type with exactly its dims: a trajectory per chunk,
    the streamed rows at the instants they become due (one per step until the next tick)."""
    outputs = """
    output_names: [eef, gripper, wrist]
    output_types: [twist, float64_array, joint_trajectory]
    output_topics: [/servo_node/delta_twist_cmds, /gripper_controller/commands, /wrist_controller/joint_trajectory]
    output_dims: ["0..5", "6", "7"]
    output_joints: ["", finger, wrist]
    output_frames: [tool0, "", ""]
    output_scales: [0.5, 1.0, 1.0]
    output_interfaces: [position, position, velocity]
    output_binarize: ["", "0.0,0.04,0.0", ""]
    action_step_period_s: 0.05
"""
    params = tmp_path / "outputs.yaml"
    params.write_text(PARAMS + "\n".join("    " + line.strip() for line in outputs.strip().splitlines()) + "\n")
    out = tmp_path / "out.mcap"
    summary = replay_offline(env.bag, out, load_replay_config(params))
    topics = decoded(out)
    assert {name: o["topic"] for name, o in summary["topics"]["outputs"].items()} == {
        "eef": "/servo_node/delta_twist_cmds", "gripper": "/gripper_controller/commands",
        "wrist": "/wrist_controller/joint_trajectory"}  # fmt: skip
    assert summary["topics"]["trajectory"] == "" and "/joint_trajectory_controller/joint_trajectory" not in topics
    chunks = topics["/oxygen_node/action_chunk"]
    rows = {t: c.data.reshape(c.horizon, c.action_dim) for t, c in chunks}
    wrist = topics["/wrist_controller/joint_trajectory"]
    assert len(wrist) == TICKS
    for t, traj in wrist:
        assert list(traj.joint_names) == ["wrist"] and all(len(p.positions) == 0 for p in traj.points)
        np.testing.assert_allclose([p.velocities[0] for p in traj.points], rows[t][:, 7], rtol=1e-6)
    twists = topics["/servo_node/delta_twist_cmds"]
    grippers = topics["/gripper_controller/commands"]
    assert len(twists) == len(grippers) == TICKS * 4  # 4 steps of 50 ms between ticks 200 ms apart
    tick_times = sorted(rows)
    for (t, tw), (tg, g) in zip(twists, grippers):
        tick = max(x for x in tick_times if x <= t)
        k = (t - tick) // (NS // 20)  # the row due at t: one per 50 ms step from the tick
        row = rows[tick][k]
        assert tw.header.frame_id == "tool0" and stamp_to_ns(tw.header.stamp) == t == tg
        got = [tw.twist.linear.x, tw.twist.linear.y, tw.twist.linear.z, tw.twist.angular.x, tw.twist.angular.y, tw.twist.angular.z]
        np.testing.assert_allclose(got, 0.5 * row[:6], rtol=1e-6)
        assert g.data.tolist() == [0.0 if row[6] > 0.0 else 0.04]
