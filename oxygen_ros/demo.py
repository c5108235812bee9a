"""The README's main job: the whole product, end to end, on the built-in tiny model.

1. write a synthetic demo scene as a real ROS 2 bag (two cameras, a 7-joint arm, an instruction);
2. start ``oxygen_node`` in its own process with ``config/demo.yaml`` and ``use_sim_time``;
3. play the bag into it live (with /clock) while this process listens to everything it publishes;
4. print what came out — chunk rate, latencies, the streamed text of each task — and stop cleanly.

The tiny model has random weights: its actions and text show the pipeline working, not skill.
Run it through ``scripts/demo.sh``, which also keeps DDS on loopback.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
NODE_NAME = "oxygen_node"


def _params(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    return next(iter(data.values()))["ros__parameters"]


def _say(text: str) -> None:
    print(text, flush=True)


class Listener:
    """Subscribes to the node's outputs and keeps what arrives."""

    def __init__(self, node, tasks: list[str], trajectory_topic: str) -> None:  # noqa: ANN001 (rclpy Node)
        from diagnostic_msgs.msg import DiagnosticArray
        from oxygen_ros_msgs.msg import ActionChunk, TextDelta
        from std_msgs.msg import String
        from trajectory_msgs.msg import JointTrajectory

        self.node = node
        self.chunks: list = []
        self.chunk_wall: list[float] = []
        self.trajectories = 0
        self.deltas: dict[str, int] = defaultdict(int)
        self.finals: dict[str, list[str]] = defaultdict(list)
        self.diagnostics = None
        base = f"/{NODE_NAME}"
        node.create_subscription(ActionChunk, f"{base}/action_chunk", self._on_chunk, 50)
        node.create_subscription(JointTrajectory, trajectory_topic, self._on_trajectory, 50)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        for task in tasks:
            node.create_subscription(TextDelta, f"{base}/text/{task}", lambda m, t=task: self._on_delta(t, m), 200)
            node.create_subscription(String, f"{base}/text/{task}/final", lambda m, t=task: self._on_final(t, m), 50)

    def _on_chunk(self, msg) -> None:  # noqa: ANN001
        self.chunks.append(msg)
        self.chunk_wall.append(time.monotonic())
        if len(self.chunks) % 5 == 1:
            _say(f"  action chunk #{msg.frame_seq}: {msg.horizon}x{msg.action_dim}, prefill "
                 f"{msg.prefill_latency_s * 1e3:.1f} ms, action {msg.action_latency_s * 1e3:.1f} ms")

    def _on_trajectory(self, msg) -> None:  # noqa: ANN001
        self.trajectories += 1

    def _on_delta(self, task: str, msg) -> None:  # noqa: ANN001
        self.deltas[task] += 1

    def _on_final(self, task: str, msg) -> None:  # noqa: ANN001
        self.finals[task].append(msg.data)
        if len(self.finals[task]) <= 3:
            _say(f"  [{task}] {msg.data!r}")

    def _on_diag(self, msg) -> None:  # noqa: ANN001
        self.diagnostics = msg


def _wait_for(condition, executor, timeout_s: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        executor.spin_once(timeout_sec=0.05)
    return condition()


def run(params_file: Path, workdir: Path, duration_s: float) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    params = _params(params_file)
    tasks = list(params.get("task_names", []))
    bag = workdir / "demo_scene.mcap"
    python = sys.executable

    _say(f"[1/4] writing the demo scene bag: {bag}")
    made = subprocess.run([python, "-m", "oxygen_ros.replay.cli", "make-demo", str(bag), "--duration", str(duration_s),
                           "--params-file", str(params_file), "--overwrite", "--quiet"])
    if made.returncode != 0:
        return made.returncode

    _say(f"[2/4] starting oxygen_node with {params_file.relative_to(ROOT) if params_file.is_relative_to(ROOT) else params_file}")
    node_proc = subprocess.Popen([python, "-m", "oxygen_ros.ros.main", "--params-file", str(params_file),
                                  "--ros-args", "-p", "use_sim_time:=true", "-r", f"__node:={NODE_NAME}"])
    rclpy.init()
    listener_node = rclpy.create_node("oxygen_demo_listener")
    executor = SingleThreadedExecutor()
    executor.add_node(listener_node)
    listener = Listener(listener_node, tasks, params.get("trajectory_topic", "/joint_trajectory_controller/joint_trajectory"))
    code = 0
    try:
        ready = _wait_for(lambda: listener_node.count_publishers(f"/{NODE_NAME}/action_chunk") > 0 or node_proc.poll() is not None,
                          executor, 120.0)
        if not ready or node_proc.poll() is not None:
            _say("the node did not come up; see its messages above")
            return 1
        _say("[3/4] playing the bag into the node (simulated time from /clock)")
        player = subprocess.Popen([python, "-m", "oxygen_ros.replay.cli", "play", str(bag), "--wait-for-subscribers", "10", "--quiet"])
        started = time.monotonic()
        _wait_for(lambda: player.poll() is not None, executor, duration_s * 4 + 60)
        _wait_for(lambda: False, executor, 1.5)  # let the last text finish streaming
        code = player.returncode or 0
        elapsed = time.monotonic() - started
    finally:
        if node_proc.poll() is None:
            node_proc.send_signal(signal.SIGINT)
            try:
                node_proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                node_proc.kill()
        executor.shutdown()
        listener_node.destroy_node()
        rclpy.shutdown()
    _say("[4/4] what came out")
    _summary(listener, elapsed, tasks)
    if node_proc.returncode not in (0, None):
        _say(f"oxygen_node exited with code {node_proc.returncode}")
        code = code or node_proc.returncode
    return code


def _summary(listener: Listener, elapsed: float, tasks: list[str]) -> None:
    chunks = listener.chunks
    _say(f"  action chunks: {len(chunks)} in {elapsed:.1f} s of replay "
         f"({len(chunks) / elapsed:.1f} per second); joint trajectories: {listener.trajectories}")
    if chunks:
        pre = statistics.median(c.prefill_latency_s for c in chunks) * 1e3
        act = statistics.median(c.action_latency_s for c in chunks) * 1e3
        _say(f"  median latency: prefill {pre:.1f} ms, action chunk {act:.1f} ms (engine mode {chunks[-1].engine_mode})")
    for task in tasks:
        texts = listener.finals.get(task, [])
        _say(f"  {task}: {len(texts)} finished requests, {listener.deltas.get(task, 0)} streamed deltas")
        for text in texts[-2:]:
            _say(f"    e.g. {text!r}")
    if listener.diagnostics is not None:
        for status in listener.diagnostics.status:
            values = ", ".join(f"{kv.key}={kv.value}" for kv in status.values[:6])
            _say(f"  diagnostics [{status.name}] level {int.from_bytes(status.level, 'little') if isinstance(status.level, bytes) else status.level}: {status.message} ({values})")
    _say("\nThe tiny model has random weights: these actions and words show the pipeline working, not skill.\n"
         "Point the node at a real pi0.5 checkpoint (README, 'Robot use') for meaningful output.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="oxygen_ros end-to-end demo on the built-in tiny model")
    parser.add_argument("--params-file", type=Path, default=ROOT / "config" / "demo.yaml")
    parser.add_argument("--workdir", type=Path, default=ROOT / "out" / "demo")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of demo scene (default 8)")
    args = parser.parse_args(argv)
    if os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") != "LOCALHOST":
        parser.error("run the demo through scripts/demo.sh (it keeps DDS on this machine)")
    args.workdir.mkdir(parents=True, exist_ok=True)
    return run(args.params_file.resolve(), args.workdir.resolve(), args.duration)


if __name__ == "__main__":
    raise SystemExit(main())
