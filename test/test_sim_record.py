"""oxygen-sim record: the simulators' experts as robot bags, at the robots' topics and units."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from oxygen_ros.interface.convert import compressed_image_to_array, image_to_array, stamp_to_ns
from oxygen_ros.replay.bagio import COMPRESSED_IMAGE, FLOAT64_ARRAY, IMAGE, JOINT_STATE, JOINT_TRAJECTORY, STRING, BagReader
from oxygen_ros.apps.oxygen_sim import main

NS = 1_000_000_000


def read(bag: Path) -> tuple[dict[str, tuple[str, int]], dict[str, list]]:
    with BagReader(bag) as reader:
        topics = {t: (i.msgtype, i.count) for t, i in reader.topics.items()}
        messages: dict[str, list] = {t: [] for t in topics}
        for m in reader.messages():
            messages[m.topic].append((m.timestamp_ns, reader.deserialize(m)))
    return topics, messages


def test_tabletop_expert_bag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = tmp_path / "tabletop.mcap"
    assert main(["record", "--env", "tabletop", "--episodes", "2", "--seed", "12345", "--bag", str(bag),
                 "--image-size", "32", "--quiet"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [e["seed"] for e in summary["episodes"]] == [12345, 12346] and summary["success_rate"] == 1.0
    topics, messages = read(bag)
    steps = sum(e["steps"] for e in summary["episodes"])
    assert topics == {"/camera/base/image_raw": (IMAGE, steps), "/camera/wrist/image_raw": (IMAGE, steps),
                      "/joint_states": (JOINT_STATE, steps), "/joint_trajectory_controller/joint_trajectory": (JOINT_TRAJECTORY, steps),
                      "/instruction": (STRING, 2), "/oxygen_sim_node/episode": (STRING, 4)}  # fmt: skip
    for (at, traj), (at_state, state) in zip(messages["/joint_trajectory_controller/joint_trajectory"], messages["/joint_states"]):
        assert at == at_state == stamp_to_ns(traj.header.stamp) == stamp_to_ns(state.header.stamp)
        assert list(traj.joint_names) == list(state.name) == ["arm_yaw", "arm_shoulder", "arm_elbow", "gripper"]
        assert len(traj.points) == 1 and stamp_to_ns(traj.points[0].time_from_start) == NS // 5
        assert 0.0 <= traj.points[0].positions[3] <= 0.08  # the gripper's opening in metres
    assert image_to_array(messages["/camera/base/image_raw"][0][1]).shape == (32, 32, 3)
    events = [json.loads(m.data) for _, m in messages["/oxygen_sim_node/episode"]]
    assert [e["event"] for e in events] == ["start", "end", "start", "end"]


def test_aloha_expert_bag_units_and_compressed_cameras(tmp_path: Path) -> None:
    from aloha_available import require_aloha

    require_aloha()
    from oxygen_ros.replay.expert_bags.aloha import AlohaBagSpec, record_expert_bag
    from oxygen_ros.sim.aloha.units import GRIPPER_JOINT_CLOSED_RAD, GRIPPER_JOINT_OPEN_RAD

    raw, png = tmp_path / "raw.mcap", tmp_path / "png.db3"
    for path, fmt in ((raw, "raw"), (png, "png")):
        info = record_expert_bag(path, AlohaBagSpec([12345], image_size=(32, 24), episode_steps=12, image_format=fmt))
        assert info["episodes"] == [{"seed": 12345, "success": False, "steps": 12}]
    topics, messages = read(raw)
    png_topics, png_messages = read(png)
    for side in ("left", "right"):
        assert topics[f"/{side}_arm_controller/joint_trajectory"] == (JOINT_TRAJECTORY, 12)
        assert topics[f"/{side}_gripper_controller/commands"] == (FLOAT64_ARRAY, 12)
        for at, traj in messages[f"/{side}_arm_controller/joint_trajectory"]:
            assert list(traj.joint_names)[0] == f"{side}_waist" and stamp_to_ns(traj.points[0].time_from_start) == NS // 50
        grippers = [m.data[0] for _, m in messages[f"/{side}_gripper_controller/commands"]]
        assert all(GRIPPER_JOINT_CLOSED_RAD - 1e-9 <= g <= GRIPPER_JOINT_OPEN_RAD + 1e-9 for g in grippers)  # radians
    state = messages["/joint_states"][0][1]
    assert len(state.name) == 18 and "left_gripper" in state.name and "left_left_finger" in state.name
    for camera in ("cam_high", "cam_left_wrist", "cam_right_wrist"):
        topic = f"/{camera}/image_raw"
        assert topics[topic] == (IMAGE, 12) and png_topics[topic] == (COMPRESSED_IMAGE, 12)
        first_raw, first_png = image_to_array(messages[topic][0][1]), compressed_image_to_array(png_messages[topic][0][1])
        assert first_raw.shape == (24, 32, 3) and np.array_equal(first_raw, first_png)  # png: the same pixels


def test_aloha_whole_episodes_go_on_past_the_hand_over(tmp_path: Path) -> None:
    from aloha_available import require_aloha

    require_aloha()
    from oxygen_ros.replay.expert_bags.aloha import AlohaBagSpec, record_expert_bag

    steps = 300  # the expert hands over near step 220 of seed 12345
    ends = record_expert_bag(tmp_path / "ends.mcap", AlohaBagSpec([12345], image_size=(8, 8), episode_steps=steps))
    whole = record_expert_bag(tmp_path / "whole.mcap", AlohaBagSpec([12345], image_size=(8, 8), episode_steps=steps,
                                                                    whole_episodes=True))  # fmt: skip
    assert ends["episodes"][0]["success"] and ends["episodes"][0]["steps"] < steps  # ends at the hand-over
    assert whole["episodes"] == [{"seed": 12345, "success": True, "steps": steps}]
    assert read(tmp_path / "whole.mcap")[0]["/joint_states"][1] == steps
