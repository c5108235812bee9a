"""The skip mark of the tests that need an idle machine: scripts/test_under_load.sh sets OXYGEN_UNDER_LOAD=1."""

from __future__ import annotations

import os

import pytest

UNDER_LOAD = os.environ.get("OXYGEN_UNDER_LOAD") == "1"


def needs_idle_machine(why: str) -> pytest.MarkDecorator:
    """Skip under load, saying why the test needs the machine to itself."""
    return pytest.mark.skipif(UNDER_LOAD, reason=f"needs an idle machine (OXYGEN_UNDER_LOAD=1): {why}")
