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
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from oxygen_ros_msgs.action import Ask
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.action.server import ServerGoalHandle
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node

from oxygen_ros.engine import ASK_TASK, QuestionRefused

from oxygen_ros.interface.convert import ns_to_stamp

__all__ = ["AskServer"]

_WAKE_S = 0.1  # how often a waiting execute callback looks at the node's state


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
    done: threading.Event = field(default_factory=threading.Event)


class AskServer:
    """The `~/ask` action server of a node whose model thread calls `pump`, `on_events` and `on_refused`."""

    def __init__(self, node: Node, callback_group: CallbackGroup) -> None:
        self._node = node
        self._runtime: Any = None
        self.max_tokens = 0
        self.max_goals = 0
        self._lock = threading.Lock()
        self._open: set[_Goal] = set()  # accepted and not resolved yet
        self._inbox: list[tuple[str, _Goal]] = []  # ("ask" | "cancel", goal) for the model thread
        self._by_request: dict[int, _Goal] = {}
        self._active = False
        self._server = ActionServer(
            node, Ask, "~/ask", execute_callback=self._execute, goal_callback=lambda goal: GoalResponse.ACCEPT,
            cancel_callback=self._on_cancel, callback_group=callback_group,
        )

    def attach(self, runtime: Any, *, max_tokens: int, max_goals: int) -> None:
        """A configured node's runtime and limits (goals are refused until `set_active(True)`)."""
        with self._lock:
            self._runtime, self.max_tokens, self.max_goals = runtime, max_tokens, max_goals

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
        while not goal.done.wait(_WAKE_S):
            if not self._node.context.ok():
                self._resolve(goal, "cancelled", "the node is shutting down")
        result = goal.result
        if result.finish_reason == "cancelled" and handle.is_cancel_requested:
            handle.canceled()
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
            reason = runtime.question_refusal(len(tokens), max_tokens)  # counters only: safe here
            if reason:
                return reason
            goal.tokens, goal.max_tokens = tokens, max_tokens
            self._open.add(goal)
            self._inbox.append(("ask", goal))
        return None

    def _on_cancel(self, handle: ServerGoalHandle) -> CancelResponse:
        with self._lock:
            goal = next((g for g in self._open if g.handle is handle), None)
            if goal is None:
                return CancelResponse.REJECT
            self._inbox.append(("cancel", goal))
        return CancelResponse.ACCEPT

    # --------------------------------------------------------------------------- model thread side
    def pump(self) -> None:
        """Hand new questions to the runtime and apply cancellations (model thread only)."""
        with self._lock:
            work, self._inbox = self._inbox, []
        for kind, goal in work:
            if goal.done.is_set():
                continue
            if kind == "ask":
                try:
                    goal.request_id = self._runtime.ask(goal.tokens, goal.max_tokens)
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
                feedback = Ask.Feedback(text=ev.text, token_ids=list(ev.token_ids), seq=goal.seq)
                goal.seq += 1
                goal.handle.publish_feedback(feedback)
            if ev.final:
                message = "cancelled by the client" if ev.finish_reason == "cancelled" and goal.handle.is_cancel_requested else (
                    "the node stopped answering" if ev.finish_reason == "cancelled" else "")
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
        if goal.done.is_set():
            return
        goal.result = Ask.Result(
            answer="".join(goal.parts), finish_reason=finish_reason, message=message,
            frame_stamp=ns_to_stamp(goal.frame_stamp_ns), frame_seq=goal.frame_seq,
            request_id=-1 if goal.request_id is None else goal.request_id,
        )
        with self._lock:
            self._open.discard(goal)
        if goal.request_id is not None:
            self._by_request.pop(goal.request_id, None)
        goal.done.set()

    @property
    def open_goals(self) -> int:
        with self._lock:
            return len(self._open)

    def destroy(self) -> None:
        self.detach()
        self._server.destroy()
