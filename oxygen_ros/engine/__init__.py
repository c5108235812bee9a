"""The OxyGen scheduler: shared prefill per frame, action first, text batched across frames.

The names below load on first use (PEP 562): ``ASK_TASK`` or ``QuestionRefused`` do not import torch, and a
command's ``--help`` stays instant.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import DEFAULT_KV_BUDGET_BYTES, Engine, EngineStats
    from .modes import MODES, FrameReport, ModeRunner, make_runner
    from .policy import DeadlinePolicy, FixedTokensPolicy, StepCostModel
    from .questions import ASK_TASK, QuestionRefused
    from .types import ChunkGuide, FrameInput, TextEvent, TextTask, TickResult

_HOMES = {
    "DEFAULT_KV_BUDGET_BYTES": "engine", "Engine": "engine", "EngineStats": "engine",
    "MODES": "modes", "FrameReport": "modes", "ModeRunner": "modes", "make_runner": "modes",
    "DeadlinePolicy": "policy", "FixedTokensPolicy": "policy", "StepCostModel": "policy",
    "ASK_TASK": "questions", "QuestionRefused": "questions",
    "ChunkGuide": "types", "FrameInput": "types", "TextEvent": "types", "TextTask": "types", "TickResult": "types",
}  # fmt: skip

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value
