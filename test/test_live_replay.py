"""Live replay into the node: a demo bag played (with /clock) into oxygen_node running in another process with
use_sim_time; the node's outputs are recorded here over DDS on loopback and match the expected counts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import rclpy
from oxygen_ros_msgs.msg import ActionChunk
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.replay.bagio import BagReader
from oxygen_ros.interface.convert import stamp_to_ns
from ros_helpers import REPO, Collector, NodeProcess, make_test_node, ros_env, spin_for, spin_until

DURATION_S = 3.0
RATE_HZ = 5.0  # config/demo.yaml


@pytest.fixture(scope="module")
def demo_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bag = tmp_path_factory.mktemp("live") / "scene.mcap"
    cmd = [sys.executable, "-m", "oxygen_ros.replay.cli", "make-demo", str(bag), "--duration", str(DURATION_S),
           "--params-file", str(REPO / "config" / "demo.yaml"), "--quiet"]
    subprocess.run(cmd, check=True, env=ros_env())
    return bag


def test_bag_played_live_into_the_node_gives_the_expected_outputs(demo_bag: Path) -> None:
    with BagReader(demo_bag) as reader:
        start_ns, end_ns = reader.start_ns, reader.end_ns
    rclpy.init()
    node, executor = make_test_node("oxygen_live_replay_test")
    chunks = Collector(node, ActionChunk, "/oxygen_node/action_chunk", 50)
    trajectories = Collector(node, JointTrajectory, "/joint_trajectory_controller/joint_trajectory", 50)
    language = Collector(node, String, "/oxygen_node/text/language/final", 50)
    memory = Collector(node, String, "/oxygen_node/text/memory/final", 50)
    # demo.yaml's tiny preset has random weights: its chunks clamped into the joints' ranges, never refused
    proc = NodeProcess([REPO / "config" / "demo.yaml"], ros_args=["-p", "use_sim_time:=true",
                                                                  "-p", "limit_out_of_range_margin:=100.0"]).start()
    try:
        up = spin_until(executor, lambda: node.count_publishers("/oxygen_node/action_chunk") > 0 or not proc.running, 90)
        assert up and proc.running, proc.output()[-3000:]
        assert len(chunks) == 0  # simulated time: nothing happens before /clock
        player = subprocess.Popen(
            [sys.executable, "-m", "oxygen_ros.replay.cli", "play", str(demo_bag), "--wait-for-subscribers", "20", "--quiet"],
            env=ros_env(),
        )
        assert spin_until(executor, lambda: player.poll() is not None, DURATION_S * 10 + 60), "player did not finish"
        assert player.returncode == 0
        spin_for(executor, 1.5)  # the last chunk and text in flight
        assert proc.stop(executor=executor) == 0, proc.output()[-3000:]
        log = proc.output()
    finally:
        proc.close()
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown()

    ticks = DURATION_S * RATE_HZ
    assert ticks * 0.5 <= len(chunks) <= ticks + 1, f"{len(chunks)} chunks for {ticks:.0f} ticks:\n{log[-4000:]}"
    # one trajectory per chunk, and the hold the node sends when it is deactivated at the end
    assert len(chunks) <= len(trajectories) <= len(chunks) + 1, log[-3000:]
    stamps = [stamp_to_ns(c.header.stamp) for c in chunks.messages]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert all(start_ns <= s <= end_ns for s in stamps), "chunk stamps are the bag's observation times"
    for c in chunks.messages:
        assert (c.horizon, c.action_dim, len(c.data)) == (10, 8, 80)
        assert list(c.joint_names)[:2] == ["panda_joint1", "panda_joint2"]
    # language starts every tick and memory every 5th; text of the last ticks may be cut by the shutdown
    assert len(language) >= len(chunks) - 3
    assert len(memory) >= 1
