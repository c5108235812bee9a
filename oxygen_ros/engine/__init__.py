"""The OxyGen scheduler: shared prefill per frame, action first, text batched across frames."""

from .engine import DEFAULT_KV_BUDGET_BYTES, Engine, EngineStats
from .modes import MODES, FrameReport, ModeRunner, make_runner
from .policy import DeadlinePolicy, FixedTokensPolicy, StepCostModel
from .types import ChunkGuide, FrameInput, TextEvent, TextTask, TickResult

__all__ = [
    "ChunkGuide", "DEFAULT_KV_BUDGET_BYTES", "DeadlinePolicy", "Engine", "EngineStats", "FixedTokensPolicy", "FrameInput",
    "FrameReport", "MODES", "ModeRunner", "StepCostModel", "TextEvent", "TextTask", "TickResult", "make_runner",
]
