"""Whether the MuJoCo ALOHA can run here: gym-aloha installed and a camera frame rendered headless (EGL).

Checked once per pytest run in a child process (a failed EGL start leaves nothing behind in the tests' own);
the ALOHA tests skip with the reason where it cannot, e.g. a machine without Mesa's EGL libraries.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

PROBE = "from oxygen_ros.sim.aloha.env import AlohaEnv; e = AlohaEnv(fast_render=True); e.reset(0); e.images(8, 8)"


@functools.cache
def aloha_problem() -> str | None:
    """None when the ALOHA simulator renders here, else why not (the probe's last line)."""
    try:
        import gym_aloha  # noqa: F401
    except ImportError:
        return "gym-aloha is not installed (scripts/setup.sh installs it)"
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return (f"MuJoCo cannot render headless here: {lines[-1] if lines else done.returncode} "
                "(scripts/setup.sh installs libegl1 libegl-mesa0 libgl1-mesa-dri as root)")
    return None


def require_aloha() -> None:
    """Skip the calling test module when the ALOHA simulator cannot run here."""
    problem = aloha_problem()
    if problem:
        pytest.skip(problem, allow_module_level=True)
