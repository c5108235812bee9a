"""The skip mark of the tests that need torch.compile's C++ toolchain, with why it is missing and how to get it."""

from __future__ import annotations

import pytest

from oxygen_ros.model.backends.compiled import compiler_available

_PROBLEM = compiler_available()
needs_compiler = pytest.mark.skipif(
    _PROBLEM is not None,
    reason=f"inductor needs a C++ compiler: {_PROBLEM} (scripts/setup.sh installs g++ and python3-dev as root)",
)
