"""`~/ask` (oxygen_ros_msgs/action/Ask): questions answered while the robot acts.

A goal's question becomes one more text request forked from the NEXT frame's shared prefix (see
`Engine.ask`): the same prefill, the same batched decode steps as the text tasks, after the action chunk.
Feedback carries the answer's text deltas; the result the whole answer, why it ended and the stamp of the
frame it was answered from. Goals are refused (accepted, then aborted with finish_reason `refused` and the
reason in `message`, so any client sees why) when the node is not active, too many goals are open, the
question is empty or too long, or the KV budget or its queue says no.

The action server lives as long as the node (adding or removing an action server while the executor spins
can stall rclpy's executor); a configured node attaches its runtime, cleanup detaches it.

Threads: the action server's callbacks run in the executor (a reentrant group); the runtime belongs to the
model thread. An execute callback checks the goal, hands it over through an inbox and blocks its executor
thread until the model thread resolves it (`ask_max_goals` bounds these; the node's executor has that many
threads more). An async execute callback would make rclpy's executor busy-spin while it waits.

Feedback delivery: the model thread only queues each delta; the goal's execute thread publishes them, all
goals together at most one message per FEEDBACK_INTERVAL_S (the deltas that arrived meanwhile go out as one
message: their texts and token ids joined, in order), and returns the result RESULT_DELAY_S after its last
message. A decode burst would otherwise overrun a client's feedback queue (rclpy keeps 10 by default, one
topic for all goals), and rclpy's ActionClient drops every feedback that it takes after the goal's result.
A cancel accepted while the answer is still being generated ends the goal as cancelled, even when its last
token comes before the model thread gets to the cancel.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from oxygen_ros_msgs.action import Ask
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.action.server import ServerGoalHandle
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSProfile

from oxygen_ros.engine import ASK_TASK, QuestionRefused

from oxygen_ros.interface.convert import ns_to_stamp

__all__ = ["AskServer"]

_WAKE_S = 0.1  # how often a waiting execute callback looks at the node's state
FEEDBACK_INTERVAL_S = 0.02  # at most one feedback message per this interval, over all goals
RESULT_DELAY_S = 0.3  # a goal's result goes out this long after its last feedback message
FEEDBACK_DEPTH = 1000  # the feedback writer's history: reliable resends must still find every delta


@dataclass(eq=False)
class _Goal:
    handle: ServerGoalHandle
    tokens: list[int] = field(default_factory=list)
    max_tokens: int = 0
    request_id: int | None = None
    parts: list[str] = field(default_factory=list)
    seq: int = 0
    frame_stamp_ns: int = 0
    frame_seq: int = -1
    result: Any = None  # Ask.Result once resolved
    cancel_accepted: bool = False
    outbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)  # feedback, then None, for the execute thread


class AskServer:
    """The `~/ask` action server of a node whose model thread calls `pump`, `on_events` and `on_refused`."""

    def __init__(self, node: Node, callback_group: CallbackGroup, name: str = "~/ask") -> None:
        self._node = node
        self.name = name
        self._runtime: Any = None
        self._robot = ""  # the runtime's name of the robot whose frames answer the questions
        self.max_tokens = 0
        self.max_goals = 0
        self._lock = threading.Lock()
        self._open: set[_Goal] = set()  # accepted and not resolved yet
        self._inbox: list[tuple[str, _Goal]] = []  # ("ask" | "cancel", goal) for the model thread
        self._by_request: dict[int, _Goal] = {}
        self._active = False
        self._pace = threading.Lock()
        self._next_feedback_s = 0.0
        self._server = ActionServer(
            node, Ask, name, execute_callback=self._execute, goal_callback=lambda goal: GoalResponse.ACCEPT,
            cancel_callback=self._on_cancel, callback_group=callback_group,
            feedback_pub_qos_profile=QoSProfile(depth=FEEDBACK_DEPTH),
        )

    def attach(self, runtime: Any, *, max_tokens: int, max_goals: int, robot: str = "") -> None:
        """A configured node's runtime, the robot it answers for, and limits (goals are refused until
        `set_active(True)`)."""
        with self._lock:
            self._runtime, self.max_tokens, self.max_goals = runtime, max_tokens, max_goals
            self._robot = robot

    def detach(self) -> None:
        self.close("the node is cleaning up")
        with self._lock:
            self._runtime = None

    # ------------------------------------------------------------------------------- executor side
    def set_active(self, active: bool) -> None:
        with self._lock:
            self._active = active

    def _execute(self, handle: ServerGoalHandle) -> Any:
        goal = _Goal(handle)
        reason = self._admit(goal)
        if reason:
            self._node.get_logger().warning(f"ask refused: {reason}")
            self._resolve(goal, "refused", reason)
        published = False
        done = False
        while not done:  # publish the deltas as they come; None: resolved, every delta was queued before it
            try:
                pending = [goal.outbox.get(timeout=_WAKE_S)]
            except queue.Empty:
                if not self._node.context.ok():
                    self._resolve(goal, "cancelled", "the node is shutting down")
                continue
            with self._pace:  # one message per interval over all goals: what arrived meanwhile goes in it
                wait = self._next_feedback_s - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                while not goal.outbox.empty():
                    pending.append(goal.outbox.get())
                done = pending[-1] is None
                deltas = [d for d in pending if d is not None]
                if deltas:
                    handle.publish_feedback(Ask.Feedback(text="".join(d.text for d in deltas), seq=goal.seq,
                                                         token_ids=[t for d in deltas for t in d.token_ids]))
                    goal.seq += 1
                    published = True
                    self._next_feedback_s = time.monotonic() + FEEDBACK_INTERVAL_S
        if published:
            time.sleep(RESULT_DELAY_S)  # let a client that keeps up take the last deltas before the result
        result = goal.result
        if result.finish_reason == "cancelled" and goal.cancel_accepted:
            deadline = time.monotonic() + 1.0  # rclpy marks the handle right after our cancel callback returns
            while not handle.is_cancel_requested and time.monotonic() < deadline:
                time.sleep(0.001)
            handle.canceled() if handle.is_cancel_requested else handle.abort()
        elif result.finish_reason in ("refused", "error", "cancelled"):
            handle.abort()
        else:
            handle.succeed()
        return result

    def _admit(self, goal: _Goal) -> str | None:
        """Check a new goal and put it into the inbox; returns the refusal reason instead."""
        request = goal.handle.request
        question = request.question.strip()
        runtime = self._runtime
        if runtime is None or not self._active:
            return "the node is not active"
        max_tokens = int(request.max_tokens) or self.max_tokens
        if not question:
            return "the question is empty"
        if max_tokens > self.max_tokens:
            return f"max_tokens {max_tokens} is above ask_max_tokens {self.max_tokens}"
        try:
            tokens = runtime.question_tokens(question)
        except ValueError as exc:  # InputError: too long for the model, not a string, ...
            return str(exc)
        with self._lock:
            if not self._active:
                return "the node is not active"
            if len(self._open) >= self.max_goals:
                return f"busy: {len(self._open)} questions are open (ask_max_goals {self.max_goals})"
            reason = runtime.question_refusal(len(tokens), max_tokens, robot=self._robot)  # counters only: safe here
            if reason:
                return reason
            goal.tokens, goal.max_tokens = tokens, max_tokens
            self._open.add(goal)
            self._inbox.append(("ask", goal))
        return None

    def _on_cancel(self, handle: ServerGoalHandle) -> CancelResponse:
        with self._lock:
            goal = next((g for g in self._open if g.handle is handle), None)
            if goal is None:  # already answered (or refused): too late to cancel
                return CancelResponse.REJECT
            goal.cancel_accepted = True
            self._inbox.append(("cancel", goal))
        return CancelResponse.ACCEPT

    # --------------------------------------------------------------------------- model thread side
    def pump(self) -> None:
        """Hand new questions to the runtime and apply cancellations (model thread only)."""
        with self._lock:
            work, self._inbox = self._inbox, []
        for kind, goal in work:
            if goal.result is not None:
                continue
            if kind == "ask":
                try:
                    goal.request_id = self._runtime.ask(goal.tokens, goal.max_tokens, robot=self._robot)
                except QuestionRefused as exc:
                    self._resolve(goal, "refused", str(exc))
                    continue
                self._by_request[goal.request_id] = goal
            elif goal.request_id is None:  # cancelled before it reached the runtime
                self._resolve(goal, "cancelled", "cancelled by the client")
            else:
                self.on_events(self._runtime.cancel(goal.request_id))

    def on_events(self, events: Sequence[Any]) -> None:
        """Feedback for each answer delta; the result on an answer's final event."""
        for ev in events:
            goal = self._by_request.get(ev.request_id) if ev.task == ASK_TASK else None
            if goal is None:
                continue
            if ev.frame_seq >= 0:
                goal.frame_stamp_ns, goal.frame_seq = ev.frame_stamp_ns, ev.frame_seq
            goal.parts.append(ev.text)
            if ev.text or ev.token_ids:
                goal.outbox.put(ev)
            if ev.final:
                message = "the node stopped answering" if ev.finish_reason == "cancelled" else ""
                self._resolve(goal, ev.finish_reason, message)

    def on_refused(self, refused: Sequence[tuple[int, str, str]]) -> None:
        """Requests the engine refused at the tick (KV memory, queue): their goals end with the reason."""
        for request_id, task, reason in refused:
            goal = self._by_request.get(request_id) if task == ASK_TASK else None
            if goal is not None:
                self._resolve(goal, "refused", f"refused when forking from the frame: {reason}")

    def close(self, message: str) -> None:
        """Resolve every open goal as cancelled (after the runtime's own final events were delivered)."""
        with self._lock:
            self._active = False
            self._inbox.clear()
            goals = list(self._open)
        for goal in goals:
            self._resolve(goal, "cancelled", message)

    def _resolve(self, goal: _Goal, finish_reason: str, message: str) -> None:
        with self._lock:
            if goal.result is not None:
                return
            self._open.discard(goal)  # from here on a cancel is refused: the outcome is decided
            if goal.cancel_accepted and finish_reason not in ("refused", "error"):
                finish_reason, message = "cancelled", "cancelled by the client"
            goal.result = Ask.Result(
                answer="".join(goal.parts), finish_reason=finish_reason, message=message,
                frame_stamp=ns_to_stamp(goal.frame_stamp_ns), frame_seq=goal.frame_seq,
                request_id=-1 if goal.request_id is None else goal.request_id,
            )
        if goal.request_id is not None:
            self._by_request.pop(goal.request_id, None)
        goal.outbox.put(None)

    @property
    def open_goals(self) -> int:
        with self._lock:
            return len(self._open)

    def destroy(self) -> None:
        self.detach()
        self._server.destroy()
