"""The environments beside .venv that scripts/setup.sh makes (scripts/extra_envs.py), for the tests that need one.

Tests never install anything (they run where no package index can be reached): a missing or out-of-date
environment skips the test with a reason that names it and says to run scripts/setup.sh, a reason .ci/run
does not allow.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from script_loader import load_script

extra_envs = load_script("extra_envs")


def extra_python(name: str) -> Path:
    """The Python of the extra environment ``name``; skips the calling test, saying how to make it, when not ready."""
    env = extra_envs.find(name)
    problem = extra_envs.problem(env)
    if problem:
        pytest.skip(problem)
    return extra_envs.python_of(env)
