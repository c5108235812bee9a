"""The real ALOHA driver's units and the normalized ones of its datasets (ACT, openpi ``aloha_real``).

The Interbotix driver of each puppet arm reports six arm joints in radians, the gripper joint in radians
(``qpos[6]``, range PUPPET_GRIPPER_JOINT) and the finger's linear position in metres (``qpos[7]``, range
PUPPET_GRIPPER_POSITION; the other finger mirrors it), and takes the gripper command as the gripper joint's
radians. ALOHA's datasets and openpi's ``real_env`` use a normalized gripper (0 closed, 1 open): the state is
``PUPPET_GRIPPER_POSITION_NORMALIZE_FN(finger)``, a command g becomes ``PUPPET_GRIPPER_JOINT_UNNORMALIZE_FN(g)``
radians. The simulated gripper turns a joint command into a finger target through the normalized value
(ACT's ``PUPPET_JOINT2POS``), which is what gym-aloha does with a normalized action.
Constants: ACT / openpi ``examples/aloha_real/constants.py`` (held by ``oxygen_ros.embodiment.aloha``).
"""

from __future__ import annotations

import numpy as np

from oxygen_ros.embodiment import aloha

DT = 0.02  # s, one control step (ALOHA's 50 Hz)
ARM_JOINTS = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")
ARMS = ("left", "right")  # the order of the 14-dim vectors: left arm + gripper, then right
# Each arm's reset pose (gym-aloha START_ARM_POSE; the fingers at 0.02239 m).
START_ARM = (0.0, -0.96, 1.16, 0.0, -0.3, 0.0)
START_FINGER_M = 0.02239

FINGER_CLOSED_M, FINGER_OPEN_M = aloha.POSITION_CLOSED_OPEN  # PUPPET_GRIPPER_POSITION_CLOSE / _OPEN
GRIPPER_JOINT_CLOSED_RAD, GRIPPER_JOINT_OPEN_RAD = aloha.JOINT_CLOSED_OPEN  # PUPPET_GRIPPER_JOINT_CLOSE / _OPEN
_TO_FINGER, _FROM_FINGER = aloha.gripper_position_converter()
_TO_JOINT, _FROM_JOINT = aloha.gripper_joint_converter()


def finger_to_normalized(finger_m: np.ndarray | float) -> np.ndarray:
    """PUPPET_GRIPPER_POSITION_NORMALIZE_FN: the finger's position → 0 closed … 1 open (the dataset's state)."""
    return np.asarray(_FROM_FINGER(np.asarray(finger_m, dtype=np.float64)))


def normalized_to_finger(value: np.ndarray | float) -> np.ndarray:
    """PUPPET_GRIPPER_POSITION_UNNORMALIZE_FN: 0 … 1 → the finger's position in metres."""
    return np.asarray(_TO_FINGER(np.asarray(value, dtype=np.float64)))


def normalized_to_gripper_joint(value: np.ndarray | float) -> np.ndarray:
    """PUPPET_GRIPPER_JOINT_UNNORMALIZE_FN: 0 … 1 → the gripper joint's radians (what the driver takes)."""
    return np.asarray(_TO_JOINT(np.asarray(value, dtype=np.float64)))


def gripper_joint_to_normalized(joint_rad: np.ndarray | float) -> np.ndarray:
    """PUPPET_GRIPPER_JOINT_NORMALIZE_FN: the gripper joint's radians → 0 … 1."""
    return np.asarray(_FROM_JOINT(np.asarray(joint_rad, dtype=np.float64)))


def gripper_joint_to_finger(joint_rad: np.ndarray | float) -> np.ndarray:
    """ACT's PUPPET_JOINT2POS: where the finger goes for a gripper joint command."""
    return normalized_to_finger(gripper_joint_to_normalized(joint_rad))


def finger_to_gripper_joint(finger_m: np.ndarray | float) -> np.ndarray:
    """ACT's PUPPET_POS2JOINT: the gripper joint angle the driver reports for a finger position."""
    return normalized_to_gripper_joint(finger_to_normalized(finger_m))
