"""The OxyGen scheduler: shared prefill per frame, action first, text batched across frames.

The names below load on first use (PEP 562): ``ASK_TASK`` or ``QuestionRefused`` do not import torch, and a
command's ``--help`` stays instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_names import load_on_first_use

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

__getattr__ = load_on_first_use(__name__, _HOMES)
