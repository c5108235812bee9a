"""oxygen-replay record over real DDS (loopback): topics subscribed as they appear, SIGINT right after a burst of
messages ends the recording cleanly with every message the publishers sent in the bag, in order."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ros_helpers import REPO, ros_env, spin_until, wait_for_match
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from oxygen_ros.replay.bagio import JOINT_STATE, STRING, BagReader

BURST = 300


def test_sigint_after_a_burst_keeps_every_message(ros, tmp_path: Path) -> None:  # noqa: ANN001
    node, executor = ros
    bag = tmp_path / "recorded.mcap"
    chatter = node.create_publisher(String, "/chatter", 10)
    joints = node.create_publisher(JointState, "/joint_states", 10)
    recorder = subprocess.Popen([sys.executable, "-m", "oxygen_ros.replay.cli", "record", "/chatter", "/joint_states",
                                 "-o", str(bag), "--remap", "/chatter:=/said", "--discovery-period", "0.1"],
                                cwd=REPO, env=ros_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        if not wait_for_match(executor, [chatter, joints], timeout=30.0):
            recorder.send_signal(signal.SIGINT)
            pytest.fail("the recorder never subscribed: " + "".join(recorder.communicate(timeout=30)))
        for i in range(BURST):
            chatter.publish(String(data=f"message {i}"))
            joints.publish(JointState(name=["j1"], position=[float(i)]))
        spin_until(executor, lambda: False, 0.05)
        recorder.send_signal(signal.SIGINT)
        out, err = recorder.communicate(timeout=30)
    finally:
        if recorder.poll() is None:
            recorder.kill()
    assert recorder.returncode == 0, err
    assert '"messages": 600' in out.strip().splitlines()[-1], out + err
    with BagReader(bag) as reader:
        assert {t: (i.msgtype, i.count) for t, i in reader.topics.items()} == {"/said": (STRING, BURST), "/joint_states": (JOINT_STATE, BURST)}
        said = [reader.deserialize(m).data for m in reader.messages(["/said"])]
        positions = [reader.deserialize(m).position[0] for m in reader.messages(["/joint_states"])]
    assert said == [f"message {i}" for i in range(BURST)]
    assert positions == [float(i) for i in range(BURST)]


def test_nothing_to_record_is_an_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "oxygen_ros.replay.cli", "record", "-o", str(tmp_path / "x.mcap")],
                          cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == "oxygen-replay: error: name the topics to record, or give --params-file or --all"
    assert not (tmp_path / "x.mcap").exists()




def test_a_node_configuration_names_its_inputs_and_outputs() -> None:
    from oxygen_ros.replay.record_cli import config_topics

    topics = config_topics(str(REPO / "config" / "robots" / "aloha.yaml"), None)
    assert topics[:4] == ["/cam_high/image_raw", "/cam_left_wrist/image_raw", "/cam_right_wrist/image_raw", "/joint_states"]
    for topic in ("/follower_left/commands/joint_group", "/follower_right/commands/joint_single", "/follower_left/joint_states",
                  "/oxygen_node/action_chunk", "/oxygen_node/instruction"):  # fmt: skip
        assert topic in topics
