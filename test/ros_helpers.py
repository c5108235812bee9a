"""Helpers for tests that talk to a node over real DDS (loopback only, see conftest.py).

Never a fixed sleep: everything waits for a condition with a deadline while spinning the test's own
node. `NodeProcess` runs `oxygen_node` in its own process with params files and the test's DDS
environment (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and the same ROS_DOMAIN_ID), and stops it with
SIGINT like a terminal would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import rclpy
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.node import Node

REPO = Path(__file__).resolve().parents[1]
SPIN_WAIT_S = 0.02  # the longest one spin_once waits for work (the same every time: see spin_until)


def ros_env(**extra: str) -> dict[str, str]:
    """os.environ with the network rule enforced and unbuffered, uncoloured logging."""
    env = dict(os.environ)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env.pop("ROS_STATIC_PEERS", None)
    if "ROS_DOMAIN_ID" not in env:
        raise RuntimeError("ROS_DOMAIN_ID is not set: import this from a test (conftest.py sets it)")
    env.update(
        PYTHONUNBUFFERED="1",
        RCUTILS_LOGGING_BUFFERED_STREAM="0",
        RCUTILS_COLORIZED_OUTPUT="0",
        OMP_NUM_THREADS="1",  # the tiny model needs no threads; fewer threads fight less on 2 cores
    )
    env.update(extra)
    return env


def spin_until(
    executor: Executor,
    predicate: Callable[[], bool],
    timeout: float,
    every: tuple[float, Callable[[], Any]] | None = None,
) -> bool:
    """Spin until `predicate()` is true or `timeout` seconds pass; returns the predicate's last value.

    `every=(period, fn)` calls `fn()` every `period` seconds meanwhile (e.g. to publish sensor data).

    Each `spin_once` waits the same time: rclpy's executor goes on through the entities one wait found ready only
    while it is called with the same arguments; a changed timeout drops the rest and waits anew, serving from the
    first node's first ready entity again, so on a busy machine the subscriptions created last (a node's last
    camera, its last joint-state topic) went unread for seconds.
    """
    deadline = time.monotonic() + timeout
    next_call = time.monotonic()
    wait = SPIN_WAIT_S if every is None else min(SPIN_WAIT_S, every[0] / 4)
    while True:
        if every is not None and time.monotonic() >= next_call:
            every[1]()
            next_call = time.monotonic() + every[0]
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return bool(predicate())
        executor.spin_once(timeout_sec=wait)


def spin_for(executor: Executor, seconds: float, every: tuple[float, Callable[[], Any]] | None = None) -> None:
    """Spin for a duration (for collecting what arrives in a window, not for waiting on something)."""
    spin_until(executor, lambda: False, seconds, every)


def wait_for_match(executor: Executor, endpoints: Sequence[Any], timeout: float = 15.0) -> bool:
    """Wait until every publisher has a subscriber and every subscription a publisher."""

    def matched() -> bool:
        for e in endpoints:
            count = e.get_subscription_count() if hasattr(e, "get_subscription_count") else e.get_publisher_count()
            if count < 1:
                return False
        return True

    return spin_until(executor, matched, timeout)


class Collector:
    """Subscribes to a topic and keeps every message with its arrival time (time.monotonic)."""

    def __init__(self, node: Node, msg_type: Any, topic: str, qos: Any = 10) -> None:
        self.messages: list[Any] = []
        self.times: list[float] = []
        self.subscription = node.create_subscription(msg_type, topic, self._on_message, qos)

    def _on_message(self, msg: Any) -> None:
        self.messages.append(msg)
        self.times.append(time.monotonic())

    def clear(self) -> None:
        self.messages.clear()
        self.times.clear()

    def since(self, t0: float) -> list[Any]:
        return [m for m, t in zip(self.messages, self.times) if t >= t0]

    def __len__(self) -> int:
        return len(self.messages)


class NodeProcess:
    """`oxygen_node` (or another node's ``module``) in its own process, output captured in a file.

    Use as a context manager or call `start()` / `stop()`. `stop()` sends SIGINT and returns the exit
    code (the process is killed if it does not exit within the timeout, and the code is then negative).
    """

    def __init__(self, params_files: Sequence[str | Path], ros_args: Sequence[str] = (), module: str = "oxygen_ros.ros.main",
                 flags: Sequence[str] = (), **env: str) -> None:  # fmt: skip
        self.args = [sys.executable, "-m", module, *flags]  # flags: e.g. --lifecycle --autostart
        for path in params_files:
            self.args += ["--params-file", str(path)]
        if ros_args:
            self.args += ["--ros-args", *ros_args]
        self.env = ros_env(**env)
        self._log = tempfile.NamedTemporaryFile(prefix="oxygen_node_", suffix=".log", delete=False)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> "NodeProcess":
        self.process = subprocess.Popen(
            self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self.env, cwd=REPO, start_new_session=True
        )
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def output(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def wait(self, timeout: float) -> int | None:
        """Exit code, or None if still running after `timeout` seconds."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 20.0, sig: int = signal.SIGINT, executor: Executor | None = None,
             repeat_after: float | None = None) -> int:
        """Send `sig` and wait for the exit code. Pass the test's executor to keep spinning meanwhile: the node
        waits for its last reliable messages to be acknowledged, which a reader that is not taken may delay.
        `repeat_after` sends the signal a second time that many seconds later (as `ros2 launch` forwards
        the Ctrl-C its terminal already delivered)."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            if repeat_after is not None:
                time.sleep(repeat_after)  # the interval under test, not a wait for a condition
                if self.process.poll() is None:
                    self.process.send_signal(sig)
            if executor is not None:
                spin_until(executor, lambda: self.process.poll() is not None, timeout)  # type: ignore[union-attr]
            if self.wait(0 if executor is not None else timeout) is None:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def close(self) -> None:
        if self.running:
            self.stop()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    def __enter__(self) -> "NodeProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def write_params(path: Path, params: dict[str, Any], node: str = "/**") -> Path:
    """Write a ROS 2 parameters file for `node` (default: every node)."""
    import yaml

    path.write_text(yaml.safe_dump({node: {"ros__parameters": params}}, sort_keys=False))
    return path


def make_test_node(name: str) -> tuple[Node, Executor]:
    """A plain node for the test side and a single-threaded executor spinning it (rclpy must be init'ed)."""
    node = rclpy.create_node(name)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    return node, executor


class FakeRuntime:
    """A stand-in for `PolicyRuntime` (same surface the node uses) that answers in microseconds.

    Actions are a ramp so tests can check clamping: row i, column j = `scale` x (i + 1) x (j + 1).
    `make_frame` records what it got; `fail_next` makes the next `step` raise.
    """

    def __init__(self, config: Any, slots: int = 3, action_dim: int = 8, state_dim: int | None = None, scale: float = 0.1):
        import numpy as np

        self.config = config
        self.dtype = config.dtype  # what PolicyRuntime reports after resolving auto
        self.num_image_slots = slots
        self.image_size = 56
        self.action_dim = action_dim
        self.state_dim = state_dim
        self.needs_state = False
        self.image_slot_names = tuple(f"slot_{i}" for i in range(slots))
        self.last_prompt_truncated = False
        self.frames: list[dict[str, Any]] = []
        self.fail_next = False
        self.closed = False
        self.decode_calls: list[tuple[float, float | None, int]] = []  # (when, deadline, ticks so far)
        self.step_calls: list[tuple[float | None, float]] = []  # (step period, expected latency) of each step
        self.forgotten = 0
        self.robots: list[str] = [""]  # "" the engine's first robot, then add_robot's names
        self.many_calls: list[list[str]] = []  # the robots of each step_many call
        h = config.horizon or 10
        self.horizon = h
        self._actions = (scale * np.outer(np.arange(1, h + 1), np.arange(1, action_dim + 1))).astype("float32")
        self._ticks = 0

    def describe(self) -> str:
        return "model: fake runtime"

    @classmethod
    def loader(cls, **kwargs: Any) -> Callable[[Any], "FakeRuntime"]:
        made: list[FakeRuntime] = []

        def load(config: Any) -> FakeRuntime:
            made.append(cls(config, **kwargs))
            return made[-1]

        load.made = made  # type: ignore[attr-defined]
        return load

    def make_frame(self, images: Sequence[Any], state: Any, instruction: str, stamp_ns: int) -> Any:
        from oxygen_ros.runtime import InputError

        if all(i is None for i in images):
            raise InputError("image", "no camera image given")
        frame = {"images": list(images), "state": state, "instruction": instruction, "stamp_ns": stamp_ns}
        self.frames.append(frame)
        return frame

    @property
    def n_action_steps(self) -> int:
        return self.config.n_action_steps or self.horizon

    def forget_chunk(self, robot: str = "") -> None:
        self.forgotten += 1

    # Several robots: each robot's frame is stepped as the only robot's would be.
    def add_robot(self, name: str) -> None:
        self.robots.append(name)

    def step_many(self, frames: dict[str, Any], step_period_s: Any = None, latency_s: Any = 0.0) -> dict[str, Any]:
        self.many_calls.append(sorted(frames))
        latency = latency_s if isinstance(latency_s, dict) else {}
        period = step_period_s if isinstance(step_period_s, dict) else dict.fromkeys(frames, step_period_s)
        return {name: self.step(frame, period.get(name), latency.get(name, 0.0)) for name, frame in frames.items()}

    def step(self, frame: Any, step_period_s: float | None = None, latency_s: float = 0.0) -> Any:
        from types import SimpleNamespace

        self.step_calls.append((step_period_s, latency_s))
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("simulated engine failure")
        tick = SimpleNamespace(frame_seq=self._ticks, stamp_ns=frame["stamp_ns"], prefill_s=0.001, action_s=0.002)
        self._ticks += 1
        return SimpleNamespace(tick=tick, actions=self._actions.copy(), events=[])

    def decode(self, deadline: float | None = None) -> list[Any]:
        self.decode_calls.append((time.monotonic(), deadline, self._ticks))
        return []

    def close(self) -> list[Any]:
        self.closed = True
        return []

    # The ~/ask surface: questions are refused (the fake decodes no text).
    def question_tokens(self, question: str) -> list[int]:
        return [1] * len(question.split())

    def question_refusal(self, n_tokens: int, max_tokens: int, robot: str = "") -> str | None:
        return "the fake runtime decodes no text"

    def ask(self, tokens: Sequence[int], max_tokens: int, robot: str = "") -> int:
        from oxygen_ros.engine import QuestionRefused

        raise QuestionRefused("the fake runtime decodes no text")

    def cancel(self, request_id: int) -> list[Any]:
        return []

    def take_peaks(self) -> tuple[int, int]:
        return 0, 0

    def stats(self) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(
            ticks=self._ticks, decode_steps=0, tokens_generated=0, last_prefill_s=0.001, last_action_s=0.002,
            last_decode_s=0.0, last_decode_batch=0, kv_used_bytes=0, kv_budget_bytes=1 << 20, live_prefixes=0,
            live_requests=0, waiting_requests=0, refused_total=0,
        )
