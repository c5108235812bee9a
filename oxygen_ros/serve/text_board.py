"""The latest text of each task of one robot, as a reply carries it beside the actions.

Per task (the parameters file's text tasks, e.g. ``narration`` and ``memory``): the text of its newest request
so far, the frame (the connection's request index) it was forked from and whether it has ended. Answers to a
request's ``"ask"`` are kept until a reply has carried them once finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oxygen_ros.engine import ASK_TASK, TextEvent


@dataclass
class _Stream:
    request_id: int
    frame: int
    text: str = ""
    done: bool = False
    reason: str = ""

    def as_reply(self) -> dict[str, Any]:
        return {"text": self.text, "frame": self.frame, "done": self.done, "finish_reason": self.reason}


@dataclass
class TextBoard:
    tasks: dict[str, _Stream] = field(default_factory=dict)
    answers: dict[int, _Stream] = field(default_factory=dict)  # request id → the answer so far
    questions: dict[int, str] = field(default_factory=dict)

    def asked(self, request_id: int, question: str) -> None:
        self.questions[request_id] = question

    def add(self, event: TextEvent) -> None:
        if event.task == ASK_TASK:
            stream = self.answers.setdefault(event.request_id, _Stream(event.request_id, event.frame_seq))
        else:
            stream = self.tasks.get(event.task)
            if stream is None or stream.request_id != event.request_id:
                if stream is not None and event.request_id < stream.request_id:
                    return  # an older request's late event: the newer text stays
                stream = self.tasks[event.task] = _Stream(event.request_id, event.frame_seq)
        stream.text += event.text
        stream.done = stream.done or event.final
        stream.reason = event.finish_reason or stream.reason

    def reply_fields(self) -> dict[str, Any]:
        """``text`` (every task's latest) and ``answers`` (each answer until it has been sent finished)."""
        out: dict[str, Any] = {"text": {name: s.as_reply() for name, s in self.tasks.items()}}
        if self.answers:
            out["answers"] = [{"id": rid, "question": self.questions.get(rid, ""), **s.as_reply()}
                              for rid, s in sorted(self.answers.items())]  # fmt: skip
            for rid in [rid for rid, s in self.answers.items() if s.done]:
                del self.answers[rid]
                self.questions.pop(rid, None)
        return out
