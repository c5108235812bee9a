"""The colcon workspace as docs/ros.md builds it: rosdep's command finds both packages, the installed package
holds the demo model its configurations name, and an installed node started from another directory finds it.
Relative model paths resolve from the working directory first, then from the package's folders."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from catkin_pkg.packages import find_packages

from oxygen_ros.runtime.paths import resolve_data_path

from ros_helpers import REPO, ros_env

DOCS = REPO / "docs" / "ros.md"


def _docs_command(program: str) -> list[str]:
    """The first line of docs/ros.md that runs `program`, split as a shell would."""
    for line in DOCS.read_text().splitlines():
        if line.startswith(program + " "):
            return shlex.split(line.split("#")[0])
    raise AssertionError(f"docs/ros.md has no `{program}` command")


def _workspace_paths(argv: list[str], option: str) -> list[Path]:
    """The paths after `option` in a command, with the workspace's src/oxygen_ros mapped to this checkout."""
    i = argv.index(option) + 1
    paths = []
    while i < len(argv) and not argv[i].startswith("-"):
        assert argv[i].startswith("src/oxygen_ros"), argv[i]
        paths.append(REPO / argv[i].removeprefix("src/oxygen_ros").lstrip("/"))
        i += 1
    return paths


@pytest.mark.parametrize("program, option", [("rosdep install", "--from-paths"), ("colcon build", "--base-paths")])
def test_the_documented_paths_name_both_packages(program: str, option: str) -> None:
    # rosdep and colcon both find packages the way catkin_pkg does: they do not look inside a package folder.
    argv = _docs_command(program)
    found = {pkg.name for path in _workspace_paths(argv, option) for pkg in find_packages(str(path)).values()}
    assert found == {"oxygen_ros", "oxygen_ros_msgs", "interbotix_xs_msgs"}  # interfaces/ holds both message packages
    assert {pkg.name for pkg in find_packages(str(REPO)).values()} == {"oxygen_ros"}  # why one path is not enough
    if program == "rosdep install":
        assert "--ignore-src" in argv  # the interface package is built from source, not installed by rosdep


def test_relative_paths_resolve_from_the_working_directory_then_the_package(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    prefix = tmp_path / "prefix"
    (prefix / "share" / "oxygen_ros" / "models" / "mine").mkdir(parents=True)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(prefix))
    monkeypatch.chdir(tmp_path)
    assert resolve_data_path("models/mine") == str(prefix / "share" / "oxygen_ros" / "models" / "mine")
    assert resolve_data_path("models/demo") == str(REPO / "models" / "demo")  # the checkout this test runs from
    (tmp_path / "models" / "mine").mkdir(parents=True)
    assert resolve_data_path("models/mine") == "models/mine"  # the working directory comes first
    assert resolve_data_path("models/none") == "models/none"  # unknown: left for the loader to report
    assert resolve_data_path("") == "" and resolve_data_path("/abs/x") == "/abs/x"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package installed (as colcon's ament_python build does, through setup.py) into a fresh prefix."""
    prefix = tmp_path_factory.mktemp("install")
    # --ignore-installed: without it pip first uninstalls the checkout's own (editable) install from the running
    # environment, and every console script of the package is gone for the tests after this one
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--ignore-installed", "--prefix", str(prefix), str(REPO)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return prefix


@pytest.mark.parametrize("model, config", [("demo", "demo_policy.yaml"), ("aloha", "aloha_demo.yaml")])
def test_the_installed_share_folder_holds_the_demo_models(installed: Path, model: str, config: str) -> None:
    share = installed / "share" / "oxygen_ros"
    shipped = {p.relative_to(REPO) for p in (REPO / "models" / model).rglob("*") if p.is_file()}
    assert shipped and {p.relative_to(share) for p in (share / "models" / model).rglob("*") if p.is_file()} == shipped
    assert f"checkpoint: models/{model}" in (share / "config" / config).read_text()


def test_the_installed_demo_config_finds_its_statistics(installed: Path) -> None:
    """config/demo.yaml names config/demo_norm_stats.json (its random model's actions into the arm's ranges)."""
    share = installed / "share" / "oxygen_ros" / "config"
    assert "norm_stats: config/demo_norm_stats.json" in (share / "demo.yaml").read_text()
    assert (share / "demo_norm_stats.json").read_text() == (REPO / "config" / "demo_norm_stats.json").read_text()


def test_the_installed_aloha_config_runs_from_any_directory(installed: Path, tmp_path: Path) -> None:
    """The installed config/aloha_demo.yaml finds the installed models/aloha from a directory outside the checkout."""
    from aloha_available import aloha_problem

    if aloha_problem():
        pytest.skip(aloha_problem())
    site = next(installed.glob("lib/python3*/site-packages"))
    share = installed / "share" / "oxygen_ros"
    env = ros_env(PYTHONPATH=str(site), AMENT_PREFIX_PATH=os.pathsep.join([str(installed), sys.prefix]))
    done = subprocess.run([sys.executable, "-m", "oxygen_ros.sim.cli", "eval", "--env", "aloha_transfer_cube", "--params-file",
                           str(share / "config" / "aloha_demo.yaml"), "--episodes", "1", "--time-limit", "0.1", "--quiet"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["episodes"] == 1


def test_an_installed_node_finds_its_model_from_any_directory(installed: Path, tmp_path: Path) -> None:
    site = next(installed.glob("lib/python3*/site-packages"))
    share = installed / "share" / "oxygen_ros"
    env = ros_env(PYTHONPATH=str(site), AMENT_PREFIX_PATH=os.pathsep.join([str(installed), sys.prefix]))
    log = tmp_path / "node.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "oxygen_ros.ros.main", "--params-file", str(share / "config" / "demo_policy.yaml"),
                                 "--ros-args", "-p", "action_backend:=eager"],
                                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            ready = re.compile(r"ready: model (\S+) ")
            deadline = time.monotonic() + 180
            while not ready.search(log.read_text()) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            match = ready.search(log.read_text())
            assert match and proc.poll() is None, log.read_text()
            assert Path(match.group(1)) == share / "models" / "demo"  # the installed copy, not the checkout
        finally:
            proc.terminate()
            proc.wait(timeout=30)
