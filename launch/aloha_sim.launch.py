"""The ALOHA policy trained here driving the MuJoCo ALOHA: oxygen_node and oxygen_sim_node over DDS.

    ros2 launch oxygen_ros aloha_sim.launch.py
    ros2 launch oxygen_ros aloha_sim.launch.py episodes:=5 seed:=100

oxygen_node serves config/aloha_demo.yaml (models/aloha in openpi's ALOHA layout, config/robots/aloha.yaml's
chain; its ~/reset_pose offers the pose the policy starts from) on sim time; oxygen_sim_node runs the gym-aloha
transfer-cube scene of config/aloha_demo_sim.yaml at the real driver's topics and units, in lockstep with the
policy (it publishes /clock):

    /cam_high/image_raw  /cam_left_wrist/image_raw  /cam_right_wrist/image_raw  /joint_states   (the inputs)
    /left_arm_controller/joint_trajectory  /left_gripper_controller/commands  (and right_)        (the commands)
    /oxygen_node/text/language  /oxygen_node/text/memory  /oxygen_node/ask                        (text, questions)

The launch ends when the simulator has run its episodes (or when oxygen_node exits first), saying how.
Without ROS launch: `bash scripts/demo.sh --robot aloha` runs the same two nodes, and prints and draws the texts.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, LogInfo, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from oxygen_ros.ros.arms_watch import ArmsWatch
from oxygen_ros.ros.launch_args import config_file, node_arguments

PACKAGE = "oxygen_ros"
ARM = "aloha"  # the one simulated robot, as ArmsWatch names it


def _nodes(context, *args, **kwargs):
    episodes = int(LaunchConfiguration("episodes").perform(context))
    seed = int(LaunchConfiguration("seed").perform(context))
    policy = Node(package=PACKAGE, executable="oxygen_node", name="oxygen_node",
                  parameters=[config_file("aloha_demo.yaml"), {"use_sim_time": True}],
                  arguments=node_arguments(False, False), output="screen", emulate_tty=True)
    sim = Node(package=PACKAGE, executable="oxygen_sim_node", name="oxygen_sim_node",
               parameters=[config_file("aloha_demo_sim.yaml"), {"episodes": episodes, "seed": seed}],
               arguments=node_arguments(False, False), output="screen", emulate_tty=True)
    watch = ArmsWatch([ARM])

    def end_when(decide):  # an exit handler: end the launch when `decide(returncode)` gives a reason
        def on_exit(event, exit_context):
            reason = None if exit_context.is_shutdown else decide(event.returncode)
            return [LogInfo(msg=reason), EmitEvent(event=Shutdown(reason=reason))] if reason else None
        return on_exit

    return [RegisterEventHandler(OnProcessExit(target_action=sim, on_exit=end_when(lambda code: watch.arm_exited(ARM, code)))),
            RegisterEventHandler(OnProcessExit(target_action=policy, on_exit=end_when(watch.policy_exited))),
            policy, sim]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("episodes", default_value="3", description="episodes the simulator runs"),
            DeclareLaunchArgument("seed", default_value="3", description="the first episode's seed (3: the demo's scenes)"),
            OpaqueFunction(function=_nodes),
        ]
    )
