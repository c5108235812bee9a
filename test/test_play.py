"""Live replay over DDS on loopback (conftest keeps it there): a subscriber in this process receives the
bag's messages with their recorded stamps and a /clock in bag time; the command stops cleanly on SIGINT
and refuses unplayable bags with one error line."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import rclpy
from rosbags.typesys import get_types_from_msg
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String

from oxygen_ros.replay.bagio import BagReader, BagWriter
from oxygen_ros.replay.cli import main
from oxygen_ros.replay.play import BagPlayer, PlayOptions
from oxygen_ros.replay.scene import SceneConfig, write_demo_bag
from oxygen_ros.interface.convert import stamp_to_ns
from oxygen_ros.interface.msg_types import oxygen_typestore

INSTRUCTION = "/oxygen_node/instruction"


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    path = tmp_path_factory.mktemp("play") / "short.mcap"
    scene = SceneConfig(duration_s=0.6, camera_rate_hz=10, joint_rate_hz=20, image_width=32, image_height=24,
                        camera_topics=["/camera/base/image_raw"], instruction_topic=INSTRUCTION)  # fmt: skip
    info = write_demo_bag(path, scene)
    stamps: dict[str, list[int]] = {}
    with BagReader(path) as reader:
        for m in reader.messages():
            stamps.setdefault(m.topic, []).append(m.timestamp_ns)
    return SimpleNamespace(path=path, info=info, stamps=stamps)


class Listener:
    """A node in its own context recording what arrives, spun by a background thread."""

    def __init__(self) -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("replay_listener", context=self.context, start_parameter_services=False)
        reliable = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.images: list[int] = []
        self.joints: list[int] = []
        self.instructions: list[str] = []
        self.clock: list[int] = []
        self.subscriptions = [
            self.node.create_subscription(Image, "/cam", lambda m: self.images.append(stamp_to_ns(m.header.stamp)), reliable),
            self.node.create_subscription(JointState, "/joint_states", lambda m: self.joints.append(stamp_to_ns(m.header.stamp)), reliable),
            self.node.create_subscription(String, INSTRUCTION, lambda m: self.instructions.append(m.data), latched),
            self.node.create_subscription(Clock, "/clock", lambda m: self.clock.append(stamp_to_ns(m.clock)), reliable),
        ]
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.running = True
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def wait_matched(self, timeout_s: float = 20.0) -> None:
        """Wait until every subscription has matched a publisher on its own side. The player's wait sees the
        writer's side only; a reliable reader that matches later misses what left the writer's history."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(s.get_publisher_count() == 0 for s in self.subscriptions):
            time.sleep(0.01)

    def _spin(self) -> None:
        while self.running:
            self.executor.spin_once(timeout_sec=0.02)

    def close(self) -> None:
        self.running = False
        self.thread.join(timeout=5)
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()


def test_play_publishes_recorded_stamps_and_clock(bag: SimpleNamespace) -> None:
    listener = Listener()
    try:
        options = PlayOptions(rate=2.0, clock_hz=50.0, wait_for_subscribers_s=20.0,
                              remap={"/camera/base/image_raw": "/cam"})  # fmt: skip
        summary = BagPlayer(bag.path, options, on_start=listener.wait_matched).play()
        expected_images = bag.stamps["/camera/base/image_raw"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (len(listener.images) < len(expected_images) or not listener.instructions):
            time.sleep(0.02)
    finally:
        listener.close()
    assert summary.warnings == [] and not summary.stopped and summary.loops == 1
    assert summary.published == {"/cam": 7, "/joint_states": 13, INSTRUCTION: 1}
    assert listener.images == expected_images  # every frame, in order, with its recorded stamp
    assert listener.joints == bag.stamps["/joint_states"]
    assert listener.instructions == ["pick up the red cup"]
    t0, end = bag.info["start_ns"], bag.info["end_ns"]
    assert listener.clock and listener.clock[0] == t0 and listener.clock == sorted(listener.clock)
    assert listener.clock[-1] <= end and summary.clock_messages == 31  # 0.6 s at 50 Hz, both ends included
    assert summary.wall_s >= 0.6 / 2.0  # paced: not faster than the recorded time / rate


def _read_stderr_until(proc: subprocess.Popen, marker: str, timeout: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while marker not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.1)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 4096).decode()
            if not chunk:
                break
            seen += chunk
    return seen


def test_play_command_stops_cleanly_on_sigint(bag: SimpleNamespace) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "oxygen_ros.replay.cli", "play", str(bag.path), "--loop", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        seen = _read_stderr_until(proc, "playing", timeout=30)
        assert "playing" in seen, seen
        time.sleep(0.8)  # into the second loop
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = seen + err.decode()
    assert proc.returncode == 0, err
    assert "stopped: published" in err and "Traceback" not in err


def test_play_refuses_missing_and_unplayable_bags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["play", str(tmp_path / "missing.mcap")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("oxygen-replay: error:") and "missing.mcap" in err and "\n" not in err

    typestore = oxygen_typestore()
    typestore.register(get_types_from_msg("string note", "not_installed_pkg/msg/Note"))
    unplayable = tmp_path / "custom.mcap"
    with BagWriter(unplayable, typestore=typestore) as writer:
        note = typestore.types["not_installed_pkg/msg/Note"](note="x")
        writer.write("/note", "not_installed_pkg/msg/Note", 1, note)
    assert main(["play", str(unplayable), "-q"]) == 2
    err = capsys.readouterr().err
    assert "no topic can be played" in err and "not_installed_pkg/msg/Note" in err and "Traceback" not in err

    with pytest.raises(SystemExit) as exit_info:  # argparse refuses a bad rate with its usage line
        main(["play", str(unplayable), "--rate", "0"])
    assert exit_info.value.code == 2
