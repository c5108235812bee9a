"""The package's layering (.importlinter) holds: no import from a lower layer up to a higher one, no import
cycle between layers, independent packages apart, rclpy only where DDS is spoken. `lint-imports` checks the
code's imports (function-level ones included) against the contracts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# lint-imports as installed beside this Python (importlinter's console script, run by this interpreter).
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    """lint-imports on the package under ``root`` with ``root``'s .importlinter."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_every_contract_is_kept() -> None:
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_an_upward_import_breaks_the_layers(tmp_path: Path) -> None:
    """The contracts bite: a copy of the package whose model imports the ROS node fails the check."""
    shutil.copytree(REPO / "oxygen_ros", tmp_path / "oxygen_ros", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    (tmp_path / "oxygen_ros" / "model" / "upward.py").write_text("import oxygen_ros.ros.node\n")
    done = _lint_imports(tmp_path)
    assert done.returncode != 0
    assert "oxygen_ros.model.upward" in done.stdout
