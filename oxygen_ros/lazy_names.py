"""A package's names that load on first use (PEP 562).

A package whose ``__init__`` re-exports heavy submodules (torch behind them) hands its ``__getattr__`` to
:func:`load_on_first_use`, so that a light submodule and a command's ``--help`` import none of them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def load_on_first_use(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``homes`` maps each name to the submodule that defines it."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{homes[name]}", package), name)
        setattr(sys.modules[package], name, value)  # later look-ups find it without coming here
        return value

    return __getattr__
