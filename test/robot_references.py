"""What each robot's own stack does with a policy's output and with the hardware's state, written out here from
its source so the tests can hold the package against it (the constants carry their file and name):

* ALOHA: openpi ``examples/aloha_real/constants.py`` and ``real_env.py`` (``get_qpos``, ``step``,
  ``set_gripper_pose``), ``examples/aloha_real/main.py`` (``max_hz=50``, ``action_horizon=25``), the pi05_aloha
  ``policy_metadata`` reset pose (``src/openpi/training/config.py``); Interbotix's puppets publish
  ``/puppet_left/joint_states`` and ``/puppet_right/joint_states`` with unprefixed names.
* DROID: openpi ``examples/droid/main.py`` (binarize the gripper, clip to [-1, 1]); DROID ``droid/robot_env.py``
  (``RobotEnv(action_space="joint_velocity", gripper_action_space="position")``), ``droid/franka/robot.py``
  (``update_joints``, ``update_gripper``, ``get_gripper_position``), ``droid/robot_ik/robot_ik_solver.py``
  (``joint_velocity_to_delta``: ``relative_max_joint_delta`` 0.2, ``control_hz`` 15); openpi's DROID client executes
  8 actions of each chunk (``open_loop_horizon``); the Panda's joint velocity limits (moveit_resources
  ``panda_moveit_config/config/joint_limits.yaml``); the ROS 2 Robotiq driver (``ros2_robotiq_gripper``:
  ``robotiq_85_left_knuckle_joint`` in rad, 0 open, ``gripper_closed_position`` 0.7929 closed).
* LIBERO: robosuite ``controllers/base_controller.py`` (``scale_action``: clip to [input_min, input_max], scale
  to [output_min, output_max]), ``controllers/osc.py`` (``set_goal``, OSC_POSE's default output_max 0.05 m and
  0.5 rad) and ``utils/control_utils.py`` (``set_goal_position``: current + delta; ``set_goal_orientation``:
  the delta rotation pre-multiplied, i.e. in the world frame); control_freq 20 and openpi's ``replan_steps`` 5
  (``examples/libero/main.py``); the OSC's measured grip-site speeds (``test/fixtures/robosuite_osc_gain.json``,
  written by ``scripts/measure_osc_gain.py``); robosuite's PandaGripper: -1 opens, +1 closes.
* SO-100/101: LeRobot ``src/lerobot/motors/motors_bus.py`` (``MotorsBus._normalize``, ``_unnormalize``), STS3215
  resolution 4096 (``motors/feetech/tables.py``); recorded at 30 fps (``lerobot-record``'s default); the policy's
  action queue takes a new chunk when its ``n_action_steps`` actions ran (``select_action``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

# Each robot's control rate (Hz) and how many actions of a chunk run before the next chunk (None: the checkpoint's).
CONTROL = {"aloha": (50.0, 25), "droid": (15.0, 8), "libero": (20.0, 5), "so101": (30.0, None)}

# ------------------------------------------------------------------------------------------ ALOHA
PUPPET_GRIPPER_POSITION_OPEN = 0.05800
PUPPET_GRIPPER_POSITION_CLOSE = 0.01844
PUPPET_GRIPPER_JOINT_OPEN = 1.4910
PUPPET_GRIPPER_JOINT_CLOSE = -0.6213


def puppet_gripper_position_normalize(x: np.ndarray) -> np.ndarray:
    return (x - PUPPET_GRIPPER_POSITION_CLOSE) / (PUPPET_GRIPPER_POSITION_OPEN - PUPPET_GRIPPER_POSITION_CLOSE)


def puppet_gripper_joint_unnormalize(x: np.ndarray) -> np.ndarray:
    return x * (PUPPET_GRIPPER_JOINT_OPEN - PUPPET_GRIPPER_JOINT_CLOSE) + PUPPET_GRIPPER_JOINT_CLOSE


def aloha_get_qpos(left_raw: np.ndarray, right_raw: np.ndarray) -> np.ndarray:
    """real_env.get_qpos from each puppet's Interbotix joint positions (6 arm, gripper, left_finger, right_finger)."""
    return np.concatenate([left_raw[:6], [puppet_gripper_position_normalize(left_raw[7])],
                           right_raw[:6], [puppet_gripper_position_normalize(right_raw[7])]])  # fmt: skip


def aloha_step(action: np.ndarray) -> dict[str, np.ndarray]:
    """real_env.step: arm joint positions as given, grippers through set_gripper_pose."""
    return {"left_arm": action[:6], "left_gripper": puppet_gripper_joint_unnormalize(action[6:7]),
            "right_arm": action[7:13], "right_gripper": puppet_gripper_joint_unnormalize(action[13:14])}  # fmt: skip


# The Interbotix driver (xs_sdk) of each puppet, as Trossen's ROS 2 ALOHA launches it (InterbotixManipulatorXS with
# robot_name follower_left / follower_right, group_name arm, gripper_name gripper): JointGroupCommand (string name,
# float32[] cmd) on <robot>/commands/joint_group, JointSingleCommand (string name, float32 cmd) on
# <robot>/commands/joint_single, joint states on <robot>/joint_states (interbotix_ros_core interbotix_xs_msgs).
ALOHA_ROBOTS = ("follower_left", "follower_right")
ALOHA_ARM_GROUP, ALOHA_GRIPPER_JOINT = "arm", "gripper"
ALOHA_JOINT_STATE_TOPICS = tuple(f"/{r}/joint_states" for r in ALOHA_ROBOTS)
ALOHA_RESET_POSE = (0.0, -1.5, 1.5, 0.0, 0.0, 0.0)


def aloha_step_rows(actions: np.ndarray) -> dict[str, np.ndarray]:
    """aloha_step over the rows of a chunk: each command's rows stacked."""
    steps = [aloha_step(a) for a in actions]
    return {key: np.stack([s[key] for s in steps]) for key in steps[0]}


# ------------------------------------------------------------------------------------------ DROID
DROID_MAX_JOINT_DELTA = 0.2  # robot_ik_solver.py relative_max_joint_delta (all 0.2) .max()
DROID_CONTROL_HZ = 15  # robot_env.py / robot_ik_solver.py control_hz
DROID_MAX_GRIPPER_WIDTH = 0.085  # Robotiq 2F-85 stroke (polymetis gripper metadata.max_width), m


def droid_client(action: np.ndarray) -> np.ndarray:
    """openpi examples/droid/main.py on one action of DroidOutputs: gripper binarized at 0.5, clip to [-1, 1]."""
    gripper = 1.0 if action[-1].item() > 0.5 else 0.0
    return np.clip(np.concatenate([action[:-1], [gripper]]), -1, 1)


def droid_joint_velocity_to_delta(joint_velocity: np.ndarray) -> np.ndarray:
    relative_max_joint_vel = np.full(7, DROID_MAX_JOINT_DELTA) / DROID_MAX_JOINT_DELTA
    max_joint_vel_norm = (np.abs(joint_velocity) / relative_max_joint_vel).max()
    if max_joint_vel_norm > 1:
        joint_velocity = joint_velocity / max_joint_vel_norm
    return joint_velocity * DROID_MAX_JOINT_DELTA


def droid_step(action: np.ndarray, joint_positions: np.ndarray) -> tuple[np.ndarray, float]:
    """RobotEnv.step in joint_velocity / gripper position: (joint position target, gripper width goto)."""
    assert action.max() <= 1 and action.min() >= -1  # RobotEnv.step's check_action_range
    target = droid_joint_velocity_to_delta(action[:7]) + joint_positions
    command = float(np.clip(action[7], 0, 1))
    return target, DROID_MAX_GRIPPER_WIDTH * (1 - command)


def droid_gripper_position(width: float) -> float:
    return 1 - width / DROID_MAX_GRIPPER_WIDTH


PANDA_MAX_JOINT_VELOCITY = np.array([2.175] * 4 + [2.61] * 3)  # rad/s
FR3_MAX_JOINT_VELOCITY = np.array([2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26])  # rad/s, Franka's FR3 datasheet, joints 1-7

# DROID's gripper command (franka/robot.py update_gripper: goto(width, speed=0.05, force=0.1)) through polymetis'
# Robotiq 2F driver (robotiq_2f_gripper.py goto): the registers written.
DROID_GRIPPER_SPEED, DROID_GRIPPER_FORCE = 0.05, 0.1


def polymetis_robotiq_registers(speed: float, force: float) -> tuple[int, int]:
    """polymetis Robotiq2FingerGripper.goto: rSP = int(clip(255 / (0.1 - 0.013) * vel - 0.013)), rFR = int(clip(255 / 100 * force))."""
    return (int(np.clip(255.0 / (0.1 - 0.013) * speed - 0.013, 0, 255)), int(np.clip(255.0 / 100.0 * force, 0, 255)))


def ros2_robotiq_register(multiplier: float) -> int:
    """ros2_robotiq_gripper's DefaultDriverFactory: set_speed / set_force(multiplier clamped to [0, 1] x 0xFF), a uint8."""
    return int(min(1.0, max(0.0, multiplier)) * 0xFF)
ROBOTIQ_KNUCKLE_CLOSED = 0.7929  # rad, ros2_robotiq_gripper's gripper_closed_position default


def robotiq_knuckle(width: float) -> float:
    """The driver's knuckle angle at an opening width: both are linear in the gripper's position register."""
    return ROBOTIQ_KNUCKLE_CLOSED * (1 - width / DROID_MAX_GRIPPER_WIDTH)


# ----------------------------------------------------------------------------------------- LIBERO
OSC_OUTPUT_MAX = np.array([0.05, 0.05, 0.05, 0.5, 0.5, 0.5])  # OSC_POSE default output_max (output_min = -max)


OSC_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "robosuite_osc_gain.json"
PANDA_FINGER_OPEN, PANDA_FINGER_CLOSED = 0.04, 0.0  # panda_finger_joint1 (m)


def osc_cases() -> list[tuple[np.ndarray, np.ndarray]]:
    """robosuite's OSC_POSE measured in MuJoCo: (delta action [6], the grip site's steady twist [6]: m/s, rad/s)."""
    data = json.loads(OSC_FIXTURE.read_text())
    return [(np.array(c["action"]), np.array(c["linear_m_s"] + c["angular_rad_s"])) for c in data["cases"]]


def robosuite_finger(gripper_action: float) -> float:
    """PandaGripper: a positive action closes the fingers, a negative one opens them."""
    return PANDA_FINGER_CLOSED if gripper_action > 0 else PANDA_FINGER_OPEN


def osc_scale_action(action: np.ndarray) -> np.ndarray:
    """base_controller.scale_action with input [-1, 1] and output [-OSC_OUTPUT_MAX, OSC_OUTPUT_MAX]."""
    action_scale = abs(OSC_OUTPUT_MAX - -OSC_OUTPUT_MAX) / abs(1.0 - -1.0)
    return (np.clip(action, -1.0, 1.0) - 0.0) * action_scale + 0.0


# ---------------------------------------------------------------------------------------- LeRobot
STS3215_RESOLUTION = 4096


def lerobot_normalize(val: int, mode: str, min_: int, max_: int, drive_mode: bool = False) -> float:
    bounded_val = min(max_, max(min_, val))
    if mode == "range_m100_100":
        norm = (((bounded_val - min_) / (max_ - min_)) * 200) - 100
        return -norm if drive_mode else norm
    if mode == "range_0_100":
        norm = ((bounded_val - min_) / (max_ - min_)) * 100
        return 100 - norm if drive_mode else norm
    mid = (min_ + max_) / 2
    return (val - mid) * 360 / (STS3215_RESOLUTION - 1)


def lerobot_unnormalize(val: float, mode: str, min_: int, max_: int, drive_mode: bool = False) -> int:
    if mode == "range_m100_100":
        val = -val if drive_mode else val
        bounded_val = min(100.0, max(-100.0, val))
        return int(((bounded_val + 100) / 200) * (max_ - min_) + min_)
    if mode == "range_0_100":
        val = 100 - val if drive_mode else val
        bounded_val = min(100.0, max(0.0, val))
        return int((bounded_val / 100) * (max_ - min_) + min_)
    mid = (min_ + max_) / 2
    return int((val * (STS3215_RESOLUTION - 1) / 360) + mid)


def feetech_driver_radians(tick: int, zero_tick: int) -> float:
    """The ROS driver this package's SO-101 config assumes: radians (tick - zero_tick) · 2π / 4096."""
    return (tick - zero_tick) * 2 * math.pi / STS3215_RESOLUTION


def feetech_driver_tick(radians: float, zero_tick: int) -> int:
    return int(round(radians * STS3215_RESOLUTION / (2 * math.pi))) + zero_tick
