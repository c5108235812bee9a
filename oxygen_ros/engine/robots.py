"""What an engine keeps per robot it serves: the task schedule's tick count, the action noise, pending questions.

One engine, one model and one KV pool serve every robot; the robot named ``""`` is the one an engine serves
from the start (a one-robot engine knows no other). Each further robot gets its own slot and a reserve of
one prefix in the KV pool, so its action prefill never waits for another robot's text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .questions import QuestionQueue

DEFAULT_ROBOT = ""


@dataclass
class RobotSlot:
    name: str
    generator: torch.Generator  # the action noise of this robot's chunks
    questions: QuestionQueue
    ticks: int = 0  # ticks since the schedule (re)started: which text tasks are due
    prefix_tokens: int = 0  # size of this robot's latest frame prefix (admission estimates)
    tokens: int = 0  # text tokens generated for this robot
    chunks: int = 0  # action chunks sampled for this robot
    request_ids: set[int] = field(default_factory=set)  # its live and waiting text requests


def new_slot(name: str, seed: int, max_questions: int, prefix_tokens: int) -> RobotSlot:
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return RobotSlot(name, generator, QuestionQueue(max_questions), prefix_tokens=prefix_tokens)
