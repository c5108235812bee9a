"""The offline tools run without rclpy: `oxygen-replay make-demo`, `offline`, `eval`, `oxygen-sim eval` and `record`
each run in a fresh interpreter that reports at exit whether `rclpy` was ever imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Runs a command's `main` as its console script does, and reports at interpreter exit (after everything the
# command imported, lazily included) whether rclpy is among the loaded modules.
WRAPPER = """
import atexit, importlib, sys
atexit.register(lambda: print("rclpy loaded:", "rclpy" in sys.modules, flush=True))
module, *argv = sys.argv[1:]
sys.exit(importlib.import_module(module).main(argv))
"""
PARAMS = """
oxygen_node:
  ros__parameters:
    model_preset: tiny
    denoise_steps: 2
    task_names: [language]
    task_prompts: [" Subtask:"]
    task_every_n_frames: [1]
    task_max_tokens: [3]
    camera_topics: [/camera/base/image_raw]
    joint_state_topic: /joint_states
    joint_names: [j1, j2, j3]
    default_instruction: "pick up the red cup"
    control_rate_hz: 5.0
    num_threads: 1
"""


def run_tool(module: str, *argv: str, cwd: Path) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", WRAPPER, module, *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert "rclpy loaded: False" in done.stdout, log
    return done.stdout


@pytest.mark.usefixtures("one_torch_thread")
def test_replay_make_demo_and_offline_never_import_rclpy(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(PARAMS)
    bag, out = tmp_path / "scene.mcap", tmp_path / "out.mcap"
    run_tool("oxygen_ros.replay.cli", "make-demo", str(bag), "--params-file", str(params), "--duration", "0.6",
             "--image-size", "32x24", "-q", cwd=tmp_path)  # fmt: skip
    report = run_tool("oxygen_ros.replay.cli", "offline", str(bag), "-o", str(out), "--params-file", str(params), "-q",
                      cwd=tmp_path)  # fmt: skip
    assert "chunks" in report and out.is_file()


def test_sim_eval_never_imports_rclpy(tmp_path: Path) -> None:
    # The shipped demo configuration (the trained demo policy), started outside the repository.
    report = run_tool("oxygen_ros.sim.cli", "eval", "--episodes", "1", "--time-limit", "1.0", "--quiet", cwd=tmp_path)
    assert '"episodes": 1' in report.splitlines()[-2]


@pytest.mark.usefixtures("one_torch_thread")
def test_replay_eval_never_imports_rclpy(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(PARAMS)
    bag = tmp_path / "scene.mcap"
    run_tool("oxygen_ros.replay.cli", "make-demo", str(bag), "--params-file", str(params), "--duration", "2.2",
             "--image-size", "32x24", "-q", cwd=tmp_path)  # fmt: skip
    report = run_tool("oxygen_ros.replay.cli", "eval", str(bag), "--params-file", str(params), "--against", "states",
                      "--out", str(tmp_path / "eval"), "-q", cwd=tmp_path)  # fmt: skip
    assert '"against": "states"' in report.splitlines()[-2] and (tmp_path / "eval" / "joints.png").is_file()


def test_sim_record_never_imports_rclpy(tmp_path: Path) -> None:
    report = run_tool("oxygen_ros.apps.oxygen_sim", "record", "--env", "tabletop", "--episodes", "1", "--seed", "7",
                      "--bag", str(tmp_path / "expert.mcap"), "--image-size", "16", "--quiet", cwd=tmp_path)  # fmt: skip
    assert '"episodes": [{"seed": 7' in report.splitlines()[-2]
