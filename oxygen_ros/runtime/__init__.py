"""The ROS-free facade that the node and the bag tools drive."""

from .config import RuntimeConfig, TaskConfig, default_tasks
from .policy import InputError, PolicyRuntime, RuntimeLoadError, StepResult, demo_tokenizer_path

__all__ = [
    "InputError", "PolicyRuntime", "RuntimeConfig", "RuntimeLoadError", "StepResult", "TaskConfig",
    "default_tasks", "demo_tokenizer_path",
]
