"""Two simulated arms driven by ONE oxygen_node: one model in memory, both arms' frames in one engine tick.

    ros2 launch oxygen_ros two_arms_sim.launch.py
    ros2 launch oxygen_ros two_arms_sim.launch.py robots:=left,right,third episodes:=5

Each arm is an oxygen_sim_node in its own namespace (/arm1, /arm2, ...) with its own scenes (seeds `seed`,
`seed + episodes`, ...) and instructions; oxygen_node (config/demo_policy.yaml, the trained demo policy) serves
them all through its `robots` parameter, so each arm's topics resolve under its namespace:

    /arm1/camera/base/image_raw  /arm1/joint_states  /arm1/instruction       (the arm's inputs)
    /arm1/joint_trajectory_controller/joint_trajectory                       (its controller command)
    /arm1/oxygen_node/text/language  /arm1/oxygen_node/ask                   (its narration, its questions)

The launch ends when the arms are done: each arm exits after its episodes, and once the last one has, launch
logs how it ended ("all 2 simulated arms finished their episodes", or which arm exited with an error) and shuts
down, oxygen_node included. It also ends when oxygen_node exits while arms still run (`oxygen_ros/ros/arms_watch.py`).
A robot launch (oxygen.launch.py) has no such end: the node keeps serving and logs one line per robot that lost its
inputs.

Without ROS launch: `python -m oxygen_ros.demos --robots 2` (scripts/demo.sh --robots 2) runs the same.
"""

from functools import partial

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, LogInfo, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from oxygen_ros.ros.arms_watch import ArmsWatch
from oxygen_ros.ros.launch_args import config_file, node_arguments, robot_names

PACKAGE = "oxygen_ros"


def _nodes(context, *args, **kwargs):
    robots = robot_names(LaunchConfiguration("robots").perform(context))
    episodes = int(LaunchConfiguration("episodes").perform(context))
    seed = int(LaunchConfiguration("seed").perform(context))
    policy = Node(package=PACKAGE, executable="oxygen_node", name="oxygen_node",
                  parameters=[config_file("demo_policy.yaml"), {"robots": robots}], arguments=node_arguments(False, False),
                  output="screen", emulate_tty=True)
    arms = [
        Node(package=PACKAGE, executable="oxygen_sim_node", name="oxygen_sim_node", namespace=robot,
             parameters=[config_file("demo_sim.yaml"), {"episodes": episodes, "seed": seed + i * episodes,
                                                    "wait_for_commander_s": 60.0}],
             arguments=node_arguments(False, False), output="screen", emulate_tty=True)
        for i, robot in enumerate(robots)
    ]
    watch = ArmsWatch(robots)

    def end_when(decide):  # an exit handler: end the launch when `decide(returncode)` gives a reason
        def on_exit(event, exit_context):
            reason = None if exit_context.is_shutdown else decide(event.returncode)
            return [LogInfo(msg=reason), EmitEvent(event=Shutdown(reason=reason))] if reason else None
        return on_exit

    handlers = [RegisterEventHandler(OnProcessExit(target_action=arm, on_exit=end_when(partial(watch.arm_exited, robot))))
                for arm, robot in zip(arms, robots)]
    handlers.append(RegisterEventHandler(OnProcessExit(target_action=policy, on_exit=end_when(watch.policy_exited))))
    return [*handlers, policy, *arms]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("robots", default_value="arm1,arm2", description="the arms' names (their namespaces)"),
            DeclareLaunchArgument("episodes", default_value="3", description="episodes per arm"),
            DeclareLaunchArgument("seed", default_value="40", description="first scene seed of the first arm"),
            OpaqueFunction(function=_nodes),
        ]
    )
