"""The OxyGen scheduler: shared prefill per frame, action first, text batched across frames."""

from .engine import DEFAULT_KV_BUDGET_BYTES, Engine, EngineStats
from .modes import MODES, FrameReport, ModeRunner, make_runner
from .policy import DeadlinePolicy, FixedTokensPolicy, StepCostModel
from .questions import ASK_TASK, QuestionRefused
from .types import ChunkGuide, FrameInput, TextEvent, TextTask, TickResult

__all__ = [
    "ASK_TASK", "ChunkGuide", "DEFAULT_KV_BUDGET_BYTES", "DeadlinePolicy", "Engine", "EngineStats", "FixedTokensPolicy",
    "FrameInput", "FrameReport", "MODES", "ModeRunner", "QuestionRefused", "StepCostModel", "TextEvent", "TextTask",
    "TickResult", "make_runner",
]
