"""The committed ALOHA policy served by oxygen-serve, the MuJoCo ALOHA driven by openpi's client and its
ActionChunkBroker (openpi's aloha_sim keys): the held-out seeds the ROS path's runtime solves are solved here
too (docs/serve.md has the 10-seed comparison and its commands)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aloha_available import aloha_problem
from openpi_client_env import REPO, client_python, free_python_env


def test_client_driven_aloha_succeeds() -> None:
    problem = aloha_problem()
    if problem:
        pytest.skip(problem)
    venv = client_python("0.1.2").parent.parent
    done = subprocess.run([sys.executable, "-m", "oxygen_ros.serve.aloha_client_loop", "--openpi-client", str(venv),
                           "--seed", "0", "--episodes", "2"], capture_output=True, text=True, timeout=600,
                          env={**free_python_env(), "MUJOCO_GL": "egl"}, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert [e["seed"] for e in out["episodes"]] == [0, 1]
    assert all(e["success"] for e in out["episodes"]), out  # seeds 0 and 1 succeed on the ROS path as well
    assert all(e["steps"] < 400 for e in out["episodes"])
