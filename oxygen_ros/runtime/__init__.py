"""The ROS-free facade that the node and the bag tools drive.

The names below load on first use (PEP 562), so that a light submodule (``params_file``, ``paths``,
``reset_pose``) and a command's ``--help`` do not import torch through this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_names import load_on_first_use

if TYPE_CHECKING:
    from .config import RuntimeConfig, TaskConfig, default_tasks
    from .policy import InputError, PolicyRuntime, RuntimeLoadError, StepResult, demo_tokenizer_path

_HOMES = {"RuntimeConfig": "config", "TaskConfig": "config", "default_tasks": "config", "InputError": "policy",
          "PolicyRuntime": "policy", "RuntimeLoadError": "policy", "StepResult": "policy",
          "demo_tokenizer_path": "policy"}  # fmt: skip

__all__ = sorted(_HOMES)

__getattr__ = load_on_first_use(__name__, _HOMES)
