"""The launch file, the configuration files and the console script that reaches the same settings.

`launch` and `launch_ros` are not on PyPI (DESIGN §4): where they cannot be imported the launch test
is skipped with that reason, and the file is still checked as Python that defines
generate_launch_description with the documented arguments.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from oxygen_ros.interface import params as P, settings as S
from oxygen_ros.ros.arms_watch import ArmsWatch
from oxygen_ros.ros.launch_args import (LaunchArgumentError, as_bool, check_params_file, node_arguments, robot_names,
                                        robot_rates)
from oxygen_ros.ros.main import main, parse_options, ros_arguments

REPO = Path(__file__).resolve().parents[1]
LAUNCH = REPO / "launch" / "oxygen.launch.py"
ARGUMENTS = {"params_file", "checkpoint", "namespace", "use_sim_time", "lifecycle", "autostart", "robots",
             "robot_rates"}
NEEDS_LAUNCH = pytest.mark.skipif(
    importlib.util.find_spec("launch_ros") is None,
    reason="launch_ros cannot be imported (ROS 2 launch is not on PyPI); run on a ROS installation",
)


def _declared_arguments(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "DeclareLaunchArgument":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant):
                names.add(first.value)
    return names


def test_launch_file_is_python_defining_generate_launch_description():
    tree = ast.parse(LAUNCH.read_text(), filename=str(LAUNCH))
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    assert _declared_arguments(tree) == ARGUMENTS
    text = LAUNCH.read_text()
    assert 'executable="oxygen_node"' in text and 'package=PACKAGE' in text


@NEEDS_LAUNCH
def test_launch_description_builds():  # pragma: no cover - needs a ROS installation
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, OpaqueFunction

    spec = importlib.util.spec_from_file_location("oxygen_launch", LAUNCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    declared = {e.name for e in description.entities if isinstance(e, DeclareLaunchArgument)}
    assert declared == ARGUMENTS
    from launch_ros.actions import LifecycleNode

    opaque = next(e for e in description.entities if isinstance(e, OpaqueFunction))
    context = LaunchContext()
    settings = dict(params_file=str(REPO / "config" / "demo.yaml"), checkpoint="/ckpt", namespace="arm",
                    use_sim_time="true", lifecycle="true", autostart="true", robots="", robot_rates="")
    context.launch_configurations.update(settings)
    (node,) = opaque.execute(context)
    assert isinstance(node, LifecycleNode)
    assert node.node_package == "oxygen_ros" and node.node_executable == "oxygen_node"
    context.launch_configurations.update(robots="arm1,,arm2")
    with pytest.raises(LaunchArgumentError, match="robots has an empty entry"):
        opaque.execute(context)
    context.launch_configurations.update(robots="")
    context.launch_configurations.update(lifecycle="false")
    (node,) = opaque.execute(context)
    assert not isinstance(node, LifecycleNode)
    context.launch_configurations.update(params_file="/no/such/robot.yaml")
    with pytest.raises(LaunchArgumentError, match="params_file '/no/such/robot.yaml' does not exist"):
        opaque.execute(context)


def test_two_arms_launch_example_serves_its_robots_from_one_node():
    path = REPO / "launch" / "two_arms_sim.launch.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    assert "generate_launch_description" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert _declared_arguments(tree) == {"robots", "episodes", "seed"}
    text = path.read_text()
    assert '{"robots": robots}' in text and 'executable="oxygen_sim_node"' in text and "namespace=robot" in text
    assert "OnProcessExit" in text and "Shutdown(" in text and "ArmsWatch(robots)" in text  # it ends with its arms


def test_a_demo_launch_ends_when_its_last_arm_exits_and_says_how() -> None:
    watch = ArmsWatch(["arm1", "arm2"])
    assert watch.arm_exited("arm2", 0) is None  # arm1 still runs
    assert watch.arm_exited("arm1", 0) == "all 2 simulated arms finished their episodes; ending the launch"
    assert watch.policy_exited(0) is None  # the node stopping with the launch says nothing more
    failed = ArmsWatch(["a", "b", "c"])
    assert failed.arm_exited("a", 1) is None and failed.arm_exited("b", 0) is None
    assert failed.arm_exited("c", -9) == ("the simulated arms exited, 2 of 3 with an error: a (code 1), c (signal 9); "
                                          "ending the launch")
    crashed = ArmsWatch(["a", "b"])
    assert crashed.arm_exited("a", 0) is None
    assert crashed.policy_exited(1) == "oxygen_node exited (code 1) while b still ran; ending the launch"
    assert crashed.arm_exited("b", 0) is None  # the launch is ending already


def _ament_prefix(tmp_path: Path) -> str | None:
    """An ament prefix holding this checkout as the installed package `oxygen_ros` (its console scripts and
    config), for launch_ros to find where the package is not installed; None where it is."""
    from ament_index_python.packages import PackageNotFoundError, get_package_prefix

    try:
        get_package_prefix("oxygen_ros")
        return None
    except (PackageNotFoundError, OSError):  # not installed, or no ament prefix at all (AMENT_PREFIX_PATH unset)
        pass
    prefix = tmp_path / "prefix"
    (prefix / "share" / "ament_index" / "resource_index" / "packages").mkdir(parents=True)
    (prefix / "share" / "ament_index" / "resource_index" / "packages" / "oxygen_ros").write_text("")
    (prefix / "share" / "oxygen_ros").mkdir(parents=True)
    (prefix / "share" / "oxygen_ros" / "config").symlink_to(REPO / "config")
    (prefix / "lib" / "oxygen_ros").mkdir(parents=True)
    for script, module in (("oxygen_node", "oxygen_ros.ros.main"), ("oxygen_sim_node", "oxygen_ros.sim_ros.main")):
        path = prefix / "lib" / "oxygen_ros" / script
        path.write_text(f"#!/bin/sh\nexec {sys.executable} -m {module} \"$@\"\n")
        path.chmod(0o755)
    return str(prefix)


def _launch_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launch_file: str, arguments: dict[str, str]) -> Any:
    """A LaunchService running one of the package's launch files, this checkout found as the package."""
    import launch.logging
    from launch import LaunchDescription, LaunchService
    from launch.actions import IncludeLaunchDescription
    from launch.launch_description_sources import PythonLaunchDescriptionSource

    prefix = _ament_prefix(tmp_path)
    if prefix is not None:
        monkeypatch.setenv("AMENT_PREFIX_PATH", os.pathsep.join(p for p in (prefix, os.environ.get("AMENT_PREFIX_PATH")) if p))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # the network rule, for every process it starts
    launch.logging.reset()  # its screen handler writes to this test's captured stdout, not an earlier test's
    service = LaunchService()
    service.include_launch_description(LaunchDescription([IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(REPO / "launch" / launch_file)), launch_arguments=arguments.items())]))
    return service


@NEEDS_LAUNCH
def test_two_arms_launch_ends_after_its_arms(tmp_path, monkeypatch, capfd) -> None:  # pragma: no cover - needs launch
    """The demo launch, run by launch itself: two simulated arms, one episode each, one oxygen_node; it returns by
    itself once both arms are done, saying so, and every process it started is gone."""
    import threading

    service = _launch_service(tmp_path, monkeypatch, "two_arms_sim.launch.py", {"episodes": "1"})
    limit_s = 240.0
    watchdog = threading.Timer(limit_s, service.shutdown)  # a launch that never ends is stopped, and fails below
    watchdog.start()
    started = time.monotonic()
    try:
        code = service.run()
    finally:
        watchdog.cancel()
    elapsed = time.monotonic() - started
    out = "".join(capfd.readouterr())
    assert elapsed < limit_s - 1, out[-4000:]
    assert code == 0 and "all 2 simulated arms finished their episodes; ending the launch" in out, out[-4000:]
    assert out.count("episode 1: success") + out.count("episode 1: failed") == 2, out[-4000:]
    assert "Traceback" not in out and "stopped (" in out, out[-4000:]  # the node stopped cleanly with the launch


def test_launch_arguments_are_checked(tmp_path):
    with pytest.raises(LaunchArgumentError, match="does not exist"):
        check_params_file(str(tmp_path / "missing.yaml"))
    with pytest.raises(LaunchArgumentError, match="params_file is empty"):
        check_params_file("")
    real = tmp_path / "robot.yaml"
    real.write_text("/**: {ros__parameters: {}}\n")
    assert check_params_file(str(real)) == str(real)
    assert as_bool("lifecycle", "True") is True and as_bool("autostart", "off") is False
    with pytest.raises(LaunchArgumentError, match="autostart must be true or false"):
        as_bool("autostart", "maybe")
    assert node_arguments(False, True) == ["--exit-with-parent"]
    assert node_arguments(True, False) == ["--exit-with-parent", "--lifecycle"]
    assert node_arguments(True, True) == ["--exit-with-parent", "--lifecycle", "--autostart"]
    options = parse_options(["x", *node_arguments(True, True), "--ros-args", "-r", "__ns:=/arm"])
    assert options.autostart and options.exit_with_parent and options.args == ["x", "--ros-args", "-r", "__ns:=/arm"]
    assert robot_names("") == [] and robot_names("arm1, arm2") == ["arm1", "arm2"] and robot_names("[a,b]") == ["a", "b"]
    with pytest.raises(LaunchArgumentError, match="namespace token"):
        robot_names("arm-1")
    with pytest.raises(LaunchArgumentError, match="unique"):
        robot_names("a,a")
    assert robot_rates("") == [] and robot_rates("5, 2.5") == [5.0, 2.5] and robot_rates("[10]") == [10.0]
    for bad, why in (("5,fast", "numbers"), ("5,0", "> 0"), ("nan", "> 0")):
        with pytest.raises(LaunchArgumentError, match=why):
            robot_rates(bad)
    assert robot_names("[]") == [] and robot_names(" [ arm1 ,arm2 ] ") == ["arm1", "arm2"]


@pytest.mark.parametrize(("text", "where"), [("arm1,,arm2", "number 2 of 3"), ("arm1,arm2,", "number 3 of 3"),
                                             (",arm1", "number 1 of 2"), ("[arm1, ,arm2]", "number 2 of 3")])
def test_a_blank_list_entry_is_refused_not_dropped(text: str, where: str) -> None:
    # Dropping it would move every later entry: with robot_rates, a rate would go to the wrong robot.
    with pytest.raises(LaunchArgumentError, match=f"robots has an empty entry \\({where}\\)"):
        robot_names(text)
    with pytest.raises(LaunchArgumentError, match=f"robot_rates has an empty entry \\({where}\\)"):
        robot_rates(text.replace("arm1", "5").replace("arm2", "2.5"))


@NEEDS_LAUNCH
def test_robot_launch_serves_each_robot_and_keeps_running_when_one_loses_its_inputs(tmp_path, monkeypatch, capfd) -> None:  # pragma: no cover - needs launch
    """oxygen.launch.py with robots:=arm1,arm2, run by launch: one ~/ask per robot and none at the root; a simulated
    arm1 that finishes its episode leaves the launch running, with one line that arm1 lost its inputs."""
    import threading

    import rclpy
    from rcl_interfaces.msg import Log
    from rclpy.action import get_action_names_and_types

    from ros_helpers import Collector, NodeProcess, make_test_node, spin_for, spin_until, write_params

    service = _launch_service(tmp_path, monkeypatch, "oxygen.launch.py",
                              {"params_file": str(REPO / "config" / "demo_policy.yaml"), "robots": "arm1,arm2"})
    found: dict[str, Any] = {}

    def probe() -> None:  # what a user sees with `ros2 action list` and on /rosout while launch runs
        rclpy.init()
        node, executor = make_test_node("launch_probe")
        rosout = Collector(node, Log, "/rosout", 1000)
        sim_params = write_params(tmp_path / "arm1.yaml", {"episodes": 1, "seed": 40, "wait_for_commander_s": 60.0})
        try:
            def asks() -> set[str]:
                return {n for n, _ in get_action_names_and_types(node) if n.endswith("/ask")}

            spin_until(executor, lambda: {"/arm1/oxygen_node/ask", "/arm2/oxygen_node/ask"} <= asks(), 90)
            spin_for(executor, 0.5)
            found["asks"] = asks()
            with NodeProcess([REPO / "config" / "demo_sim.yaml", sim_params], ros_args=["-r", "__ns:=/arm1"],
                             module="oxygen_ros.sim_ros.main") as sim:  # fmt: skip
                found["sim"] = spin_until(executor, lambda: not sim.running, 90) and sim.wait(1)
            lost = lambda: [m.msg for m in rosout.messages if "inputs lost" in m.msg]  # noqa: E731
            spin_until(executor, lambda: bool(lost()), 10)
            spin_for(executor, 3.0)  # a warning per tick would show here
            found["lost"] = lost()
        finally:
            executor.shutdown()
            node.destroy_node()
            rclpy.shutdown()
            service.shutdown()  # as Ctrl-C would

    prober = threading.Thread(target=probe)
    watchdog = threading.Timer(240.0, service.shutdown)
    prober.start()
    watchdog.start()
    try:
        code = service.run()
    finally:
        watchdog.cancel()
        prober.join(60)
    out = "".join(capfd.readouterr())
    assert found["asks"] == {"/arm1/oxygen_node/ask", "/arm2/oxygen_node/ask"}, found
    assert found["sim"] == 0, out[-4000:]
    assert len(found["lost"]) == 1 and found["lost"][0].startswith("robot arm1: inputs lost"), found["lost"]
    assert code == 0 and "Traceback" not in out and "stopped (" in out, out[-4000:]


# ---------------------------------------------------------------------------------------- configs
def _ros_params(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    assert list(data) == ["/**"], f"{path.name}: parameters for every node name ('/**') expected"
    return data["/**"]["ros__parameters"]


@pytest.mark.parametrize("name", ["demo.yaml", "pi05_robot.yaml"])
def test_config_files_name_only_known_parameters(name):
    values = _ros_params(REPO / "config" / name)
    unknown = set(values) - set(P.SPECS) - {"use_sim_time"}
    assert not unknown, f"{name}: unknown parameters {sorted(unknown)}"


@pytest.mark.parametrize("name", ["demo.yaml", "pi05_robot.yaml"])
def test_config_topics_are_relative_so_a_namespace_moves_the_robot(name):
    values = _ros_params(REPO / "config" / name)
    topics = [t for t in values["camera_topics"] if t] + [values[k] for k in ("joint_state_topic", "trajectory_topic")]
    assert all(not t.startswith("/") for t in topics), topics
    assert values["instruction_topic"].startswith("~/")
    assert "namespace" in (REPO / "config" / name).read_text()  # documented where it is set


def test_package_xml_declares_ros_and_python_dependencies():
    import xml.etree.ElementTree as ET

    root = ET.parse(REPO / "package.xml").getroot()
    deps = {e.text for e in root if e.tag in ("depend", "exec_depend")}
    ros = {"rclpy", "rcl_interfaces", "ament_index_python", "lifecycle_msgs", "action_msgs", "oxygen_ros_msgs"}
    python = {"python3-torch", "python3-numpy", "python3-yaml", "python3-pil", "python3-matplotlib",
              "python3-transformers-pip", "python3-rosbags-pip"}
    assert ros | python <= deps, sorted((ros | python) - deps)
    readme = (REPO / "README.md").read_text()
    for no_key in ("safetensors", "sentencepiece"):  # no rosdep key: the README says how to get them
        assert f"`{no_key}`" in readme


def test_demo_config_is_valid_and_as_documented():
    values = _ros_params(REPO / "config" / "demo.yaml")
    assert S.validate_values(values) == []
    settings, runtime = S.settings_from_values(values)
    assert runtime.model_preset == "tiny" and runtime.checkpoint == ""
    assert [t for t in settings.camera_topics if t] and "" in settings.camera_topics  # cameras + a masked slot
    assert len([t for t in settings.camera_topics if t]) == 2
    assert len(settings.joint_names) == 7 and settings.control_rate_hz == 5.0
    assert [(t.name, t.every_n_frames) for t in runtime.tasks] == [("language", 1), ("memory", 5)]


def test_robot_config_documents_every_parameter_and_is_valid_once_filled_in():
    path = REPO / "config" / "pi05_robot.yaml"
    values = _ros_params(path)
    missing = set(P.SPECS) - set(values)
    assert not missing, f"pi05_robot.yaml does not show {sorted(missing)}"
    lines = path.read_text().splitlines()
    for key in values:  # each parameter has a comment on the lines just above it
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
        above = lines[max(0, at - 6):at]
        assert any(line.strip().startswith("#") for line in above), f"{key} has no comment"
    assert "FILL IN" in path.read_text()
    filled = {k: v for k, v in values.items() if k != "use_sim_time"} | {"checkpoint": "", "tokenizer": ""}
    assert S.validate_values(filled) == []
    # The example is openpi's pi05_libero: trained with discrete_state_input=False (no state in the prompt).
    assert "libero" in values["checkpoint"] and values["prompt_format"] == "pi05"
    assert values["horizon"] == 0 and values["norm_mode"] == "auto"  # the checkpoint's chunk length and statistics


def test_setup_installs_launch_config_and_the_console_script():
    text = (REPO / "setup.py").read_text()
    assert '"oxygen_node = oxygen_ros.ros.main:main"' in text
    assert 'glob("launch/*.launch.py")' in text and 'glob("config/*.yaml")' in text


# ------------------------------------------------------------------------- the console script's args
def test_plain_params_file_becomes_ros_arguments():
    assert ros_arguments(["oxygen_node", "--params-file", "a.yaml"]) == ["oxygen_node", "--ros-args", "--params-file", "a.yaml"]
    assert ros_arguments(["x", "--params-file=a.yaml", "--params-file", "b.yaml", "--ros-args", "-p", "seed:=3"]) == [
        "x", "--ros-args", "--params-file", "a.yaml", "--params-file", "b.yaml", "-p", "seed:=3"
    ]
    standard = ["x", "--ros-args", "--params-file", "a.yaml", "-r", "__ns:=/arm"]
    assert ros_arguments(standard) == standard
    assert ros_arguments(["x"]) == ["x"]


def test_lifecycle_flags(capsys):
    options = parse_options(["oxygen_node", "--lifecycle", "--params-file", "a.yaml"])
    assert options.lifecycle and not options.autostart and options.args == ["oxygen_node", "--ros-args", "--params-file", "a.yaml"]
    assert main(["oxygen_node", "--autostart"]) == 2
    assert "--autostart needs --lifecycle" in capsys.readouterr().err


def test_bad_command_lines_exit_2_and_help_exits_0(capsys):
    assert main(["oxygen_node", "--bogus"]) == 2
    assert "unknown argument '--bogus'" in capsys.readouterr().err
    for args in (["--params-file", "no/such.yaml"], ["--ros-args", "--params-file", "no/such.yaml"]):
        assert main(["oxygen_node", *args]) == 2  # not rcl's YAML parser's message
        assert "--params-file no/such.yaml: no such file" in capsys.readouterr().err
    assert main(["oxygen_node", "--params-file"]) == 2
    assert "--params-file needs a path" in capsys.readouterr().err
    assert main(["oxygen_node", "--help"]) == 0
    assert "--params-file PATH" in capsys.readouterr().out


def test_a_repeated_signal_within_the_window_is_the_same_request(monkeypatch):
    from oxygen_ros.ros import main as main_module

    exits: list[int] = []
    monkeypatch.setattr(main_module.os, "_exit", exits.append)
    clock = iter([100.0, 100.05, 100.9, 101.5])
    monkeypatch.setattr(main_module.time, "monotonic", lambda: next(clock))
    request = main_module.ShutdownRequest(window_s=1.0)
    request.on_signal(2, None)
    assert request.event.is_set() and exits == []
    request.on_signal(2, None)  # launch forwarding the terminal's Ctrl-C 50 ms later
    request.on_signal(15, None)
    assert exits == []
    request.on_signal(2, None)  # 1.5 s later: the user insists
    assert exits == [130]
