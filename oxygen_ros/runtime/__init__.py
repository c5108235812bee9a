"""The ROS-free facade that the node and the bag tools drive.

The names below load on first use (PEP 562), so that a light submodule (``params_file``, ``paths``,
``reset_pose``) and a command's ``--help`` do not import torch through this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import RuntimeConfig, TaskConfig, default_tasks
    from .policy import InputError, PolicyRuntime, RuntimeLoadError, StepResult, demo_tokenizer_path

_HOMES = {"RuntimeConfig": "config", "TaskConfig": "config", "default_tasks": "config", "InputError": "policy",
          "PolicyRuntime": "policy", "RuntimeLoadError": "policy", "StepResult": "policy",
          "demo_tokenizer_path": "policy"}  # fmt: skip

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value
