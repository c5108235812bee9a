"""Two simulated arms driven by ONE oxygen_node: one model in memory, both arms' frames in one engine tick.

    ros2 launch oxygen_ros two_arms_sim.launch.py
    ros2 launch oxygen_ros two_arms_sim.launch.py robots:=left,right,third episodes:=5

Each arm is an oxygen_sim_node in its own namespace (/arm1, /arm2, ...) with its own scenes (seeds `seed`,
`seed + episodes`, ...) and instructions; oxygen_node (config/demo_policy.yaml, the trained demo policy) serves
them all through its `robots` parameter, so each arm's topics resolve under its namespace:

    /arm1/camera/base/image_raw  /arm1/joint_states  /arm1/instruction       (the arm's inputs)
    /arm1/joint_trajectory_controller/joint_trajectory                       (its controller command)
    /arm1/oxygen_node/text/language  /arm1/oxygen_node/ask                   (its narration, its questions)

Without ROS launch: `python -m oxygen_ros.demo --robots 2` (scripts/demo.sh --robots 2) runs the same.
"""

import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from oxygen_ros.ros.launch_args import robot_names

PACKAGE = "oxygen_ros"


def _config(name: str) -> str:
    try:
        from ament_index_python.packages import get_package_share_directory

        return os.path.join(get_package_share_directory(PACKAGE), "config", name)
    except Exception:  # not installed (running from a checkout): the repository's copy
        return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "config", name)


def _nodes(context, *args, **kwargs):
    robots = robot_names(LaunchConfiguration("robots").perform(context))
    episodes = int(LaunchConfiguration("episodes").perform(context))
    seed = int(LaunchConfiguration("seed").perform(context))
    nodes = [
        Node(package=PACKAGE, executable="oxygen_node", name="oxygen_node",
             parameters=[_config("demo_policy.yaml"), {"robots": robots}], output="screen", emulate_tty=True)
    ]
    for i, robot in enumerate(robots):
        nodes.append(
            Node(package=PACKAGE, executable="oxygen_sim_node", name="oxygen_sim_node", namespace=robot,
                 parameters=[_config("demo_sim.yaml"), {"episodes": episodes, "seed": seed + i * episodes,
                                                        "wait_for_commander_s": 60.0}],
                 output="screen", emulate_tty=True)
        )
    return nodes


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("robots", default_value="arm1,arm2", description="the arms' names (their namespaces)"),
            DeclareLaunchArgument("episodes", default_value="3", description="episodes per arm"),
            DeclareLaunchArgument("seed", default_value="40", description="first scene seed of the first arm"),
            OpaqueFunction(function=_nodes),
        ]
    )
