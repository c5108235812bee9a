"""The shipped ALOHA launch file (the policy node on config/aloha_demo.yaml beside the MuJoCo ALOHA of
config/aloha_demo_sim.yaml) and the reset pose that config offers: the pose the policy starts from.

`launch` and `launch_ros` are not on PyPI (DESIGN §4): the file is checked as Python with its arguments and
nodes everywhere, and built where launch_ros can be imported."""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

import pytest

from oxygen_ros.interface.settings import settings_from_values
from oxygen_ros.ros.launch_args import config_file
from oxygen_ros.runtime.params_file import read_params_file
from oxygen_ros.runtime.reset_pose import reset_pose, reset_targets
from oxygen_ros.serve.cli import served_metadata
from oxygen_ros.serve.layouts import LAYOUTS
from oxygen_ros.sim.aloha.units import START_ARM
from test_launch import NEEDS_LAUNCH, _declared_arguments

REPO = Path(__file__).resolve().parents[1]
LAUNCH = REPO / "launch" / "aloha_sim.launch.py"


def test_aloha_launch_runs_the_demo_policy_beside_the_simulator() -> None:
    tree = ast.parse(LAUNCH.read_text(), filename=str(LAUNCH))
    assert "generate_launch_description" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert _declared_arguments(tree) == {"episodes", "seed"}
    text = LAUNCH.read_text()
    assert 'executable="oxygen_node"' in text and 'config_file("aloha_demo.yaml")' in text
    assert 'executable="oxygen_sim_node"' in text and 'config_file("aloha_demo_sim.yaml")' in text
    assert '{"use_sim_time": True}' in text  # the simulator publishes /clock and steps in lockstep with the policy
    assert "OnProcessExit" in text and "Shutdown(" in text  # it ends with the simulator's episodes
    setup = (REPO / "setup.py").read_text()
    assert 'glob("launch/*.launch.py")' in setup and 'glob("config/*.yaml")' in setup  # installed as the others


def test_config_file_finds_the_shipped_configs() -> None:
    for name in ("aloha_demo.yaml", "aloha_demo_sim.yaml", "demo_policy.yaml"):
        assert os.path.isfile(config_file(name)), config_file(name)


@NEEDS_LAUNCH
def test_aloha_launch_description_builds() -> None:  # pragma: no cover - needs a ROS installation
    from launch import LaunchContext
    from launch.actions import OpaqueFunction
    from launch_ros.actions import Node

    spec = importlib.util.spec_from_file_location("aloha_launch", LAUNCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    opaque = next(e for e in description.entities if isinstance(e, OpaqueFunction))
    context = LaunchContext()
    context.launch_configurations.update(episodes="2", seed="7")
    nodes = [e for e in opaque.execute(context) if isinstance(e, Node)]
    assert sorted(n.node_executable for n in nodes) == ["oxygen_node", "oxygen_sim_node"]


def test_the_demo_config_offers_the_pose_its_policy_starts_from() -> None:
    values, _ = read_params_file(REPO / "config" / "aloha_demo.yaml", node="oxygen_node")
    pose = reset_pose(values)
    assert pose == START_ARM  # the MuJoCo ALOHA's reset pose, where every episode of the training data starts
    settings, _ = settings_from_values(values)
    targets = reset_targets(pose, settings.outputs)
    assert [spec.name for spec, _ in targets] == ["left_arm", "right_arm"]  # ~/reset_pose names both arms' joints
    assert all(target == START_ARM for _, target in targets)
    # oxygen-serve sends the same pose to openpi's ALOHA client
    assert served_metadata(LAYOUTS["aloha"].metadata, values) == {"reset_pose": list(START_ARM)}
    assert tuple(LAYOUTS["aloha"].metadata["reset_pose"]) == START_ARM


def test_relative_config_paths_work_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from oxygen_ros.ros.main import parse_options, require_params_files
    from oxygen_ros.runtime.params_file import ParamsFileError

    monkeypatch.chdir(tmp_path)
    values, _ = read_params_file("config/aloha_demo.yaml", node="oxygen_node")
    assert values["embodiment"] == "aloha"
    options = require_params_files(parse_options(["oxygen_node", "--params-file", "config/aloha_demo.yaml"]))
    assert options.args[-1] == str(REPO / "config" / "aloha_demo.yaml")
    with pytest.raises(ParamsFileError, match=f"looked in {tmp_path} and in the package's folders"):
        read_params_file("config/no_such.yaml")
