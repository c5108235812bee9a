"""Every console script's ``--help``: answered without importing torch or rclpy (so it is instant), under the
command's own name, with the defaults and choices an option takes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# A command line's help in a fresh interpreter: the modules it imported, its exit code and its text.
PROBE = """
import contextlib, importlib, io, json, sys
module, function, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.argv = ["probe", *argv]  # not the command's name: a parser without its own prog shows up
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = getattr(importlib.import_module(module), function)()
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code or 0, "text": out.getvalue(),
                  "heavy": sorted(m for m in ("torch", "rclpy", "mujoco") if m in sys.modules)}))
"""


def console_scripts() -> dict[str, tuple[str, str]]:
    """name -> (module, function) of every console script setup.py installs."""
    text = (REPO / "setup.py").read_text()
    return {name: (module, function) for name, module, function in
            re.findall(r'"([\w-]+) = ([\w.]+):(\w+)"', text)}  # fmt: skip


def run_help(name: str, *args: str) -> dict:
    module, function = console_scripts()[name]
    argv = [*args, "--help"]
    proc = subprocess.run([sys.executable, "-c", PROBE, module, function, *argv], capture_output=True, text=True,
                          timeout=120, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


COMMANDS = [
    ("oxygen_node",), ("oxygen_lifecycle_node",), ("oxygen_sim_node",), ("oxygen-bench",), ("oxygen-replay",), ("oxygen-replay", "eval"),
    ("oxygen-replay", "record"), ("oxygen-sim",), ("oxygen-sim", "eval"), ("oxygen-sim", "record"),
    ("oxygen-sim", "chunking"), ("oxygen-sim", "expert"), ("oxygen-serve",), ("oxygen-train-demo",),
    ("oxygen-train-demo", "--env", "aloha_transfer_cube"), ("oxygen-ctl",), ("oxygen-ctl", "ask"),
]


def test_every_console_script_is_covered() -> None:
    names = set(console_scripts())
    assert names <= {c[0] for c in COMMANDS}, names


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_imports_neither_torch_nor_rclpy(command: tuple[str, ...]) -> None:
    result = run_help(*command)
    assert result["code"] == 0
    assert result["heavy"] == [], f"{' '.join(command)} --help imported {result['heavy']}"
    assert result["text"].startswith(f"usage: {command[0]}"), result["text"][:200]


def options_help(text: str) -> str:
    return " ".join(text.split())  # argparse wraps lines: compare on one line


def test_help_states_defaults_and_choices() -> None:
    serve = options_help(run_help("oxygen-serve")["text"])
    assert "robots served at once (each has a KV reserve; default 8)" in serve
    assert "(default 24)" in serve and "(default 10.0)" in serve
    assert "{aloha,droid,libero,auto}" in serve
    train = options_help(run_help("oxygen-train-demo")["text"])
    for fragment in ("samples per optimizer step (default 32)", "(default 0.002)", "warm-up steps of the learning rate (default 100)",
                     "flow-matching (action) loss (default 1.0)", "next-token loss (default 1.0)", "{tabletop,aloha_transfer_cube}"):  # fmt: skip
        assert fragment in train, fragment
    bench = options_help(run_help("oxygen-bench")["text"])
    assert "of action_only, sequential, parallel, shared, oxygen (default: all)" in bench
    assert "actions per chunk H (default 10)" in bench and "denoising steps per chunk (default 10)" in bench
    assert "episodes per family (default 20)" in options_help(run_help("oxygen-sim", "eval")["text"])
    assert "episodes recorded into the bag (default 1)" in options_help(run_help("oxygen-sim", "record")["text"])
    sim_node = run_help("oxygen_sim_node")["text"]
    assert "--lifecycle" not in sim_node and "--autostart" not in sim_node


def test_train_takes_the_older_env_spelling_with_a_note() -> None:
    proc = subprocess.run([sys.executable, "-c", "from oxygen_ros.train.cli import parse_args; "
                           "print(parse_args(['--env', 'table_top']).env)"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "tabletop"
    assert "--env table_top is now spelled tabletop" in proc.stderr


def test_demo_help_names_its_script() -> None:
    proc = subprocess.run([sys.executable, "-m", "oxygen_ros.demos", "--help"], capture_output=True, text=True,
                          timeout=120, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("usage: scripts/demo.sh"), proc.stdout[:200]
