"""Checks of the launch file's arguments, kept free of `launch` (not on PyPI) so they are tested anywhere."""

from __future__ import annotations

import math
import os

from oxygen_ros.interface.topic_names import robot_name_problem

__all__ = ["LaunchArgumentError", "as_bool", "check_params_file", "config_file", "node_arguments", "robot_names",
           "robot_rates"]


class LaunchArgumentError(ValueError):
    """A launch argument is wrong; the message says which and why (launch prints it and exits 1)."""


def as_bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off", ""):
        return False
    raise LaunchArgumentError(f"{name} must be true or false, got {text!r}")


def check_params_file(path: str) -> str:
    """The params file's absolute path; raises when it is missing, so the node never starts on its defaults."""
    if not path:
        raise LaunchArgumentError("params_file is empty: give a ROS 2 parameters YAML")
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        raise LaunchArgumentError(f"params_file {path!r} does not exist (looked for {full})")
    return full


def config_file(name: str, package: str = "oxygen_ros") -> str:
    """A shipped config file: the installed package's (ament index), else the checkout's this module runs from."""
    try:
        from ament_index_python.packages import get_package_share_directory

        return os.path.join(get_package_share_directory(package), "config", name)
    except Exception:  # not installed (running from a checkout): the repository's copy
        return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "config", name))


def node_arguments(lifecycle: bool, autostart: bool) -> list[str]:
    """Command-line flags of oxygen_node (and oxygen_sim_node) started by launch (see oxygen_ros/ros/main.py).

    Always `--exit-with-parent`: `ros2 launch` killed with SIGTERM leaves its children running; with it they
    stop cleanly, as on SIGINT, when launch dies."""
    flags = ["--exit-with-parent"]
    if lifecycle:
        flags += ["--lifecycle", *(["--autostart"] if autostart else [])]
    return flags


def _items(name: str, text: str) -> list[str]:
    """A list launch argument's items: "a,b" or "[a, b]" ("" or "[]" = none). A blank entry ("a,,b", "a,")
    is refused: it is a typo, and dropping it would shift every later entry (one rate per robot)."""
    inner = text.strip().removeprefix("[").removesuffix("]").strip()
    if not inner:
        return []
    items = [item.strip() for item in inner.split(",")]
    blank = [i + 1 for i, item in enumerate(items) if not item]
    if blank:
        raise LaunchArgumentError(f"{name} has an empty entry (number {blank[0]} of {len(items)}) in {text!r}: "
                                  "separate the entries by single commas")
    return items


def robot_names(text: str) -> list[str]:
    """The `robots` launch argument ("arm1,arm2" or "[arm1, arm2]"; "" = one robot) as a list of names."""
    names = _items("robots", text)
    problems = [r for n in names if (r := robot_name_problem(n))]
    if problems:
        raise LaunchArgumentError(f"robots: {problems[0]}")
    if len(set(names)) != len(names):
        raise LaunchArgumentError(f"robots must be unique, got {names}")
    return names


def robot_rates(text: str) -> list[float]:
    """The `robot_rates` launch argument ("5,2.5" or "[5, 2.5]"; "" = none) as control rates in Hz; the node
    checks at configure that there is one per robot."""
    items = _items("robot_rates", text)
    try:
        rates = [float(p) for p in items]
    except ValueError:
        raise LaunchArgumentError(f"robot_rates must be numbers in Hz separated by commas, got {text!r}") from None
    if any(not (math.isfinite(r) and r > 0) for r in rates):
        raise LaunchArgumentError(f"robot_rates must be finite and > 0, got {text!r}")
    return rates
