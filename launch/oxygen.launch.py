"""Launch the oxygen_ros policy node.

    ros2 launch oxygen_ros oxygen.launch.py
    ros2 launch oxygen_ros oxygen.launch.py params_file:=/path/robot.yaml checkpoint:=/models/pi05_libero \
        namespace:=arm use_sim_time:=true

Arguments:
    params_file   ROS 2 parameters YAML (default: the package's config/demo.yaml)
    checkpoint    overrides the file's 'checkpoint' when not empty
    namespace     namespace of the node (topics such as ~/action_chunk follow it)
    use_sim_time  'true' to follow /clock (bag replay, simulation)

Everything set here is reachable without launch: `oxygen_node --params-file FILE --ros-args
-p checkpoint:=DIR -p use_sim_time:=true -r __ns:=/NAMESPACE`.
"""

import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "oxygen_ros"


def _default_params_file() -> str:
    try:
        from ament_index_python.packages import get_package_share_directory

        return os.path.join(get_package_share_directory(PACKAGE), "config", "demo.yaml")
    except Exception:  # not installed (running from a checkout): the repository's copy
        return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "config", "demo.yaml")


def _as_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off", ""):
        return False
    raise ValueError(f"use_sim_time must be true or false, got {text!r}")


def _node(context, *args, **kwargs):
    """Build the node once the arguments are known (an empty checkpoint must not override the file)."""
    params_file = LaunchConfiguration("params_file").perform(context)
    checkpoint = LaunchConfiguration("checkpoint").perform(context)
    overrides = {"use_sim_time": _as_bool(LaunchConfiguration("use_sim_time").perform(context))}
    if checkpoint:
        overrides["checkpoint"] = checkpoint
    return [
        Node(
            package=PACKAGE,
            executable="oxygen_node",
            name="oxygen_node",
            namespace=LaunchConfiguration("namespace").perform(context),
            parameters=[params_file, overrides],
            output="screen",
            emulate_tty=True,
        )
    ]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("params_file", default_value=_default_params_file(),
                                  description="ROS 2 parameters YAML for oxygen_node"),
            DeclareLaunchArgument("checkpoint", default_value="",
                                  description="checkpoint folder; overrides the params file when not empty"),
            DeclareLaunchArgument("namespace", default_value="", description="namespace of the node"),
            DeclareLaunchArgument("use_sim_time", default_value="false", description="follow /clock (true/false)"),
            OpaqueFunction(function=_node),
        ]
    )
