"""Launch the oxygen_ros policy node.

    ros2 launch oxygen_ros oxygen.launch.py
    ros2 launch oxygen_ros oxygen.launch.py params_file:=/path/robot.yaml checkpoint:=/models/pi05_libero \
        namespace:=arm use_sim_time:=true
    ros2 launch oxygen_ros oxygen.launch.py autostart:=false     # managed node left unconfigured
    ros2 launch oxygen_ros oxygen.launch.py lifecycle:=false     # the plain node

Arguments:
    params_file   ROS 2 parameters YAML (default: the package's config/demo.yaml); must exist
    checkpoint    overrides the file's 'checkpoint' when not empty
    namespace     namespace of the node; with the shipped YAMLs' relative topic names it moves the whole
                  robot (cameras, joint states, trajectory, ~/ topics)
    use_sim_time  'true' to follow /clock (bag replay, simulation)
    lifecycle     'true' (default): a managed node (ros2 lifecycle get/set /oxygen_node)
    autostart     'true' (default): the managed node configures and activates itself at start
    robots        comma-separated robot names (e.g. arm1,arm2): one node, one model, each robot's topics under
                  <namespace>/<robot>; empty (default) = the params file's 'robots' (one robot unless it names some)
    robot_rates   comma-separated control rates in Hz, one per robot (e.g. 5,2.5); empty (default) = the params
                  file's 'robot_control_rates_hz' (every robot at control_rate_hz unless it sets them)

Everything set here is reachable without launch: `oxygen_node [--lifecycle [--autostart]] --params-file
FILE --ros-args -p checkpoint:=DIR -p use_sim_time:=true -r __ns:=/NAMESPACE -p "robots:=[arm1,arm2]"
-p "robot_control_rates_hz:=[5.0,2.5]"`. Launch starts the node with `--exit-with-parent`: should launch die without
stopping it (SIGTERM, a crash), the node stops cleanly. Stop launch itself with SIGINT (docs/ros.md, "Stopping it
from systemd, a supervisor or a container").
"""

import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node

from oxygen_ros.ros.launch_args import as_bool, check_params_file, node_arguments, robot_names, robot_rates

PACKAGE = "oxygen_ros"


def _default_params_file() -> str:
    try:
        from ament_index_python.packages import get_package_share_directory

        return os.path.join(get_package_share_directory(PACKAGE), "config", "demo.yaml")
    except Exception:  # not installed (running from a checkout): the repository's copy
        return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "config", "demo.yaml")


def _node(context, *args, **kwargs):
    """Build the node once the arguments are known (an empty checkpoint must not override the file)."""
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    params_file = check_params_file(arg("params_file"))  # a missing file stops launch with that message
    lifecycle = as_bool("lifecycle", arg("lifecycle"))
    overrides = {"use_sim_time": as_bool("use_sim_time", arg("use_sim_time"))}
    if arg("checkpoint"):
        overrides["checkpoint"] = arg("checkpoint")
    if robot_names(arg("robots")):
        overrides["robots"] = robot_names(arg("robots"))
    if robot_rates(arg("robot_rates")):
        overrides["robot_control_rates_hz"] = robot_rates(arg("robot_rates"))
    node_class = LifecycleNode if lifecycle else Node
    return [
        node_class(
            package=PACKAGE,
            executable="oxygen_node",
            name="oxygen_node",
            namespace=arg("namespace"),
            parameters=[params_file, overrides],
            arguments=node_arguments(lifecycle, as_bool("autostart", arg("autostart"))),
            output="screen",
            emulate_tty=True,
        )
    ]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("params_file", default_value=_default_params_file(),
                                  description="ROS 2 parameters YAML for oxygen_node (must exist)"),
            DeclareLaunchArgument("checkpoint", default_value="",
                                  description="checkpoint folder; overrides the params file when not empty"),
            DeclareLaunchArgument("namespace", default_value="", description="namespace of the node (moves the whole robot)"),
            DeclareLaunchArgument("use_sim_time", default_value="false", description="follow /clock (true/false)"),
            DeclareLaunchArgument("lifecycle", default_value="true", description="a managed (lifecycle) node (true/false)"),
            DeclareLaunchArgument("autostart", default_value="true",
                                  description="configure and activate the managed node at start (true/false)"),
            DeclareLaunchArgument("robots", default_value="",
                                  description="robot names served by this one node, e.g. arm1,arm2 ('' = the params file's)"),
            DeclareLaunchArgument("robot_rates", default_value="",
                                  description="control rate in Hz of each robot, e.g. 5,2.5 ('' = the params file's)"),
            OpaqueFunction(function=_node),
        ]
    )
