"""oxygen_ros_msgs: the generated messages round-trip through rclpy's serializer and are readable
(and writable) by rosbags with the definitions that msg_types registers.

DESIGN §4 warns that rclpy pads garbage after an EMPTY float64 array, which rosbags rejects. Our
messages only have float32/int32 arrays; empty ones are checked here to survive rclpy -> rosbags.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from rosbags.typesys import Stores

from builtin_interfaces.msg import Duration, Time
from oxygen_ros.interface.msg_types import (
    MSG_NAMES,
    candidate_msg_dirs,
    default_store,
    find_msg_dir,
    oxygen_types,
    oxygen_typestore,
)
from oxygen_ros_msgs.msg import ActionChunk, TextDelta

REPO_MSG_DIR = Path(__file__).resolve().parents[1] / "msg"
ACTION_CHUNK = "oxygen_ros_msgs/msg/ActionChunk"
TEXT_DELTA = "oxygen_ros_msgs/msg/TextDelta"


def full_action_chunk() -> ActionChunk:
    msg = ActionChunk()
    msg.header.stamp = Time(sec=1_700_000_000, nanosec=123_456_789)
    msg.header.frame_id = "base_camera"
    msg.frame_seq = 2**40 + 7
    msg.joint_names = ["shoulder", "elbow", "wrist"]
    msg.horizon = 2
    msg.action_dim = 3
    msg.step_period = Duration(sec=0, nanosec=20_000_000)
    msg.data = [0.5, -1.25, 3.0, 1e-3, 7.5, -0.0625]
    msg.prefill_latency_s = 0.125
    msg.action_latency_s = 0.03125
    msg.latency_s = 0.1875
    msg.n_action_steps = 5
    msg.engine_mode = "oxygen"
    return msg


def full_text_delta(token_ids: list[int] | None = None) -> TextDelta:
    msg = TextDelta()
    msg.header.stamp = Time(sec=1_700_000_001, nanosec=5)
    msg.header.frame_id = "policy"
    msg.request_id = 2**33 + 1
    msg.task = "subtask"
    msg.seq = 4
    msg.text = " pick up the cup ✓"
    msg.token_ids = [17, -1, 2**31 - 1, 256_000] if token_ids is None else token_ids
    msg.final = True
    msg.finish_reason = "eos"
    msg.source_stamp = Time(sec=1_700_000_000, nanosec=999_999_999)
    msg.source_frame_seq = 41
    return msg


def test_action_chunk_round_trips_through_rclpy_serialization():
    msg = full_action_chunk()
    back = deserialize_message(serialize_message(msg), ActionChunk)
    assert back == msg
    assert list(back.data) == [0.5, -1.25, 3.0, pytest.approx(1e-3), 7.5, -0.0625]


def test_text_delta_round_trips_through_rclpy_serialization():
    msg = full_text_delta()
    back = deserialize_message(serialize_message(msg), TextDelta)
    assert back == msg
    assert back.text == " pick up the cup ✓"


def test_typestore_is_kilted_with_our_types():
    assert default_store() == Stores.ROS2_KILTED  # this rosbags has Kilted: no fallback
    store = oxygen_typestore()
    for name in ("oxygen_ros_msgs/msg/ActionChunk", "oxygen_ros_msgs/msg/TextDelta", "sensor_msgs/msg/Image"):
        assert name in store.types


def _assert_action_chunk_equal(rosbags_msg, msg: ActionChunk) -> None:
    assert rosbags_msg.header.stamp.sec == msg.header.stamp.sec
    assert rosbags_msg.header.stamp.nanosec == msg.header.stamp.nanosec
    assert rosbags_msg.header.frame_id == msg.header.frame_id
    assert rosbags_msg.frame_seq == msg.frame_seq
    assert list(rosbags_msg.joint_names) == list(msg.joint_names)
    assert (rosbags_msg.horizon, rosbags_msg.action_dim) == (msg.horizon, msg.action_dim)
    assert (rosbags_msg.step_period.sec, rosbags_msg.step_period.nanosec) == (
        msg.step_period.sec,
        msg.step_period.nanosec,
    )
    np.testing.assert_array_equal(rosbags_msg.data, np.asarray(msg.data, dtype=np.float32))
    assert rosbags_msg.prefill_latency_s == pytest.approx(msg.prefill_latency_s)
    assert rosbags_msg.action_latency_s == pytest.approx(msg.action_latency_s)
    assert rosbags_msg.latency_s == pytest.approx(msg.latency_s) and rosbags_msg.n_action_steps == msg.n_action_steps
    assert rosbags_msg.engine_mode == msg.engine_mode


def _assert_text_delta_equal(rosbags_msg, msg: TextDelta) -> None:
    assert (rosbags_msg.header.stamp.sec, rosbags_msg.header.stamp.nanosec) == (
        msg.header.stamp.sec,
        msg.header.stamp.nanosec,
    )
    assert rosbags_msg.header.frame_id == msg.header.frame_id
    assert rosbags_msg.request_id == msg.request_id
    assert rosbags_msg.task == msg.task
    assert rosbags_msg.seq == msg.seq
    assert rosbags_msg.text == msg.text
    np.testing.assert_array_equal(rosbags_msg.token_ids, np.asarray(msg.token_ids, dtype=np.int32))
    assert rosbags_msg.final == msg.final
    assert rosbags_msg.finish_reason == msg.finish_reason
    assert (rosbags_msg.source_stamp.sec, rosbags_msg.source_stamp.nanosec) == (
        msg.source_stamp.sec,
        msg.source_stamp.nanosec,
    )
    assert rosbags_msg.source_frame_seq == msg.source_frame_seq


def test_rosbags_reads_action_chunk_serialized_by_rclpy_and_back():
    store = oxygen_typestore()
    msg = full_action_chunk()
    decoded = store.deserialize_cdr(serialize_message(msg), ACTION_CHUNK)
    _assert_action_chunk_equal(decoded, msg)
    # and the other way: bytes written by rosbags (as the bag tools do) read back in rclpy
    assert deserialize_message(bytes(store.serialize_cdr(decoded, ACTION_CHUNK)), ActionChunk) == msg


def test_rosbags_reads_text_delta_serialized_by_rclpy_and_back():
    store = oxygen_typestore()
    msg = full_text_delta()
    decoded = store.deserialize_cdr(serialize_message(msg), TEXT_DELTA)
    _assert_text_delta_equal(decoded, msg)
    assert deserialize_message(bytes(store.serialize_cdr(decoded, TEXT_DELTA)), TextDelta) == msg


def test_empty_arrays_from_rclpy_are_readable_by_rosbags():
    store = oxygen_typestore()
    chunk = full_action_chunk()
    chunk.joint_names, chunk.data = [], []
    _assert_action_chunk_equal(store.deserialize_cdr(serialize_message(chunk), ACTION_CHUNK), chunk)
    delta = full_text_delta(token_ids=[])
    _assert_text_delta_equal(store.deserialize_cdr(serialize_message(delta), TEXT_DELTA), delta)


def test_type_hashes_match_rosidl():
    """rosbags computes the same RIHS01 type hash as the rosidl build (so bags are compatible)."""
    store = oxygen_typestore()
    installed = Path(sys.prefix) / "share" / "oxygen_ros_msgs" / "msg"
    for name in MSG_NAMES:
        generated = installed / f"{name}.json"
        if not generated.is_file():
            pytest.skip(f"{generated} not installed: run bash scripts/setup.sh (builds oxygen_ros_msgs into .venv)")
        expected = json.loads(generated.read_text())["type_hashes"][0]
        assert expected["type_name"] == f"oxygen_ros_msgs/msg/{name}"
        assert store.hash_rihs01(f"oxygen_ros_msgs/msg/{name}") == expected["hash_string"]


def test_installed_definitions_match_the_repository():
    """A stale build (msg/ edited, scripts/build_interfaces.sh not re-run) fails here."""
    found = find_msg_dir()
    for name in MSG_NAMES:
        assert (found / f"{name}.msg").read_text() == (REPO_MSG_DIR / f"{name}.msg").read_text(), (
            f"{found / name}.msg differs from msg/{name}.msg: re-run scripts/build_interfaces.sh"
        )


def test_msg_dir_falls_back_to_the_repository(monkeypatch, tmp_path):
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert candidate_msg_dirs()[0] == tmp_path / "share" / "oxygen_ros_msgs" / "msg"
    assert find_msg_dir() == REPO_MSG_DIR
    assert set(oxygen_types(REPO_MSG_DIR)) >= {ACTION_CHUNK, TEXT_DELTA}


def test_missing_definitions_raise_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="ActionChunk.msg"):
        oxygen_types(tmp_path)


def test_ask_action_is_built_from_the_repository_definition():
    """The installed Ask.action equals action/Ask.action (a stale build fails here) and its types import."""
    from oxygen_ros_msgs.action import Ask

    installed = Path(sys.prefix) / "share" / "oxygen_ros_msgs" / "action" / "Ask.action"
    repo = Path(__file__).resolve().parents[1] / "action" / "Ask.action"
    if installed.is_file():
        assert installed.read_text() == repo.read_text(), "re-run scripts/build_interfaces.sh"
    goal, result, feedback = Ask.Goal(question="q", max_tokens=3), Ask.Result(), Ask.Feedback()
    assert (goal.question, goal.max_tokens) == ("q", 3)
    assert {"answer", "finish_reason", "message", "frame_stamp", "frame_seq", "request_id"} <= set(result.get_fields_and_field_types())
    assert {"text", "token_ids", "seq"} <= set(feedback.get_fields_and_field_types())


def test_interbotix_commands_have_the_drivers_fields_and_go_through_a_bag(tmp_path: Path) -> None:
    """interbotix_xs_msgs as built into the venv: JointGroupCommand (string name, float32[] cmd) and
    JointSingleCommand (string name, float32 cmd), as interbotix_ros_core defines them; the replay writes both to a
    bag without rclpy's help and reads them back as the output's command timeline."""
    from interbotix_xs_msgs.msg import JointGroupCommand, JointSingleCommand

    from oxygen_ros.interface.interbotix import interbotix_msg
    from oxygen_ros.replay.bagio import JOINT_GROUP, JOINT_SINGLE, BagReader, BagWriter
    from oxygen_ros.replay.recorded import command_timeline
    from oxygen_ros.runtime.outputs import OutputSpec

    assert JointGroupCommand.get_fields_and_field_types() == {"name": "string", "cmd": "sequence<float>"}
    assert JointSingleCommand.get_fields_and_field_types() == {"name": "string", "cmd": "float"}
    arm = OutputSpec("left_arm", "joint_group", "/follower_left/commands/joint_group", tuple(range(6)), tuple("abcdef"), group="arm")
    grip = OutputSpec("left_gripper", "joint_single", "/follower_left/commands/joint_single", (6,), ("g",), group="gripper")
    rows = np.array([[0.1, -0.96, 1.16, 0.0, -0.3, 0.25], [0.2, -0.9, 1.1, 0.05, -0.25, 0.3]])
    with BagWriter(tmp_path / "xs.mcap") as writer:
        for k, row in enumerate(rows):
            writer.write(arm.topic, JOINT_GROUP, (k + 1) * 20_000_000, interbotix_msg("joint_group", "arm", row))
            writer.write(grip.topic, JOINT_SINGLE, (k + 1) * 20_000_000, interbotix_msg("joint_single", "gripper", row[-1:]))
    with BagReader(tmp_path / "xs.mcap") as reader:
        got = {t: [(m.timestamp_ns, reader.deserialize(m)) for m in reader.messages([t])] for t in (arm.topic, grip.topic)}
    assert [m.name for _, m in got[arm.topic]] == ["arm", "arm"] and got[grip.topic][0][1].name == "gripper"
    arm_line, grip_line = command_timeline(arm, arm.topic, got[arm.topic]), command_timeline(grip, grip.topic, got[grip.topic])
    assert np.allclose(np.array(arm_line.values), rows, atol=1e-6)  # float32 on the wire
    assert np.allclose(np.array(grip_line.values)[:, 0], rows[:, -1], atol=1e-6)
    with pytest.raises(ValueError, match="NaN or infinite"):
        interbotix_msg("joint_group", "arm", np.array([np.nan] * 6))
