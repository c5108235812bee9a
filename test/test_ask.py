"""`~/ask` over real DDS with an rclpy action client against `oxygen_node` in its own process (tiny model,
one decode step per tick so answers span several frames): answered from the NEXT frame with feedback deltas
that add up to the answer, several goals at once, cancel mid-answer, refusals with the reason."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rclpy
from action_msgs.msg import GoalStatus
from oxygen_ros_msgs.action import Ask
from rclpy.action import ActionClient

from oxygen_ros.interface.convert import stamp_to_ns
from ros_helpers import spin_until
from test_node import INSTRUCTION, TEST_OVERRIDES, Robot, robot_process

# 8 MiB of KV hold ~32k tiny-model tokens: an answer of 100k tokens is refused by the KV budget.
OVERRIDES = {**TEST_OVERRIDES, "tokens_per_frame": 1, "ask_max_goals": 3, "ask_max_tokens": 100_000, "kv_budget_mb": 8.0}


@contextlib.contextmanager
def ask_robot(folder: Path, driver: str, overrides: dict[str, Any]) -> Iterator[Robot]:
    """oxygen_node with ``overrides`` in its own process and a driver with an Ask client (default QoS) ready."""
    rclpy.init()
    try:
        with robot_process(folder, driver, overrides) as robot:
            robot.client = ActionClient(robot.node, Ask, "/oxygen_node/ask")
            assert spin_until(robot.executor, robot.client.server_is_ready, timeout=30), robot.process.output()
            yield robot
            code = robot.process.stop(timeout=30, executor=robot.executor)
            assert code == 0 and "Traceback" not in robot.process.output(), robot.process.output()[-3000:]
    finally:
        rclpy.shutdown()


@pytest.fixture(scope="module")
def asker(tmp_path_factory):
    with ask_robot(tmp_path_factory.mktemp("ask"), "ask_driver", OVERRIDES) as robot:
        yield robot


class Goal:
    """One goal sent through the action client, its feedback and its result."""

    def __init__(self, robot: Robot, question: str, max_tokens: int) -> None:
        self.robot = robot
        self.feedback: list[Any] = []
        self.sent_after_seq = max((c.frame_seq for c in robot.chunks.messages), default=-1)
        self._send = robot.client.send_goal_async(Ask.Goal(question=question, max_tokens=max_tokens),
                                                  feedback_callback=lambda msg: self.feedback.append(msg.feedback))
        self._result: Any = None

    def accepted(self) -> Any:
        assert self.robot.spin_until(self._send.done, timeout=15)
        handle = self._send.result()
        assert handle.accepted
        return handle

    def result(self, timeout: float = 60) -> Any:
        if self._result is None:
            self._result = self.accepted().get_result_async()
        assert self.robot.spin_until(self._result.done, timeout=timeout), self.robot.process.output()[-3000:]
        return self._result.result()


def test_question_is_answered_from_the_next_frame_while_chunks_flow(asker):
    goal = Goal(asker, "what is in the gripper?", 6)
    before = len(asker.chunks)
    t0 = time.monotonic()
    answer = goal.result()
    assert answer.status == GoalStatus.STATUS_SUCCEEDED, answer.result
    r = answer.result
    assert r.finish_reason in ("max_tokens", "eos", "stop") and r.message == ""
    assert r.answer == "".join(f.text for f in goal.feedback)
    assert [f.seq for f in goal.feedback] == list(range(len(goal.feedback))) and goal.feedback
    assert sum(len(f.token_ids) for f in goal.feedback) >= 1
    assert r.frame_seq > goal.sent_after_seq  # a frame after the question arrived, not an old one
    assert stamp_to_ns(r.frame_stamp) in asker.base_stamps  # that frame's observation stamp
    assert r.request_id >= 0
    # Action chunks kept their rate meanwhile (5 Hz; the answer took several ticks at one token per tick).
    elapsed = time.monotonic() - t0
    assert len(asker.chunks) - before >= max(1, int(2.5 * elapsed) - 2), (len(asker.chunks) - before, elapsed)


def test_several_goals_at_once(asker):
    goals = [Goal(asker, f"question number {i}?", 4 + i) for i in range(3)]
    results = [g.result() for g in goals]
    assert all(res.status == GoalStatus.STATUS_SUCCEEDED for res in results), [res.result for res in results]
    assert len({res.result.request_id for res in results}) == 3
    for g, res in zip(goals, results):
        assert res.result.answer == "".join(f.text for f in g.feedback)


def test_cancel_mid_answer(asker):
    goal = Goal(asker, "describe the whole scene in detail", 40)
    handle = goal.accepted()
    assert asker.spin_until(lambda: len(goal.feedback) >= 1, timeout=30)
    cancel = handle.cancel_goal_async()
    assert asker.spin_until(cancel.done, timeout=15) and cancel.result().goals_canceling
    res = goal.result(timeout=30)
    assert res.status == GoalStatus.STATUS_CANCELED, res.result
    assert res.result.finish_reason == "cancelled" and "client" in res.result.message
    assert res.result.answer == "".join(f.text for f in goal.feedback)
    assert len(goal.feedback) < 40


def _refused(res: Any) -> str:
    assert res.status == GoalStatus.STATUS_ABORTED and res.result.finish_reason == "refused", res.result
    return res.result.message


def test_refusals_say_why(asker):
    assert "empty" in _refused(Goal(asker, "   ", 4).result())
    assert "too large" in _refused(Goal(asker, "tell me everything", 100_000).result())  # the KV budget says no
    # ask_max_goals = 3: a fourth open goal is refused as busy; the others still finish.
    goals = [Goal(asker, f"long question {i}", 30) for i in range(3)]
    for g in goals:
        g.accepted()
    assert asker.spin_until(lambda: all(g.feedback for g in goals), timeout=30)
    assert "busy" in _refused(Goal(asker, "one more", 4).result())
    for g in goals:
        g.accepted().cancel_goal_async()
    assert all(g.result().result.finish_reason in ("cancelled", "eos", "max_tokens", "stop") for g in goals)
    assert asker.process.running
    asker.instruct(INSTRUCTION)
