"""openpi's ALOHA transforms (``policies/aloha_policy.py``, ``adapt_to_pi``): two arms of 6 joints + gripper.

pi's runtime, on which the base model was trained, flips two joints per arm and measures the gripper as an
angle; ALOHA measures a linear gripper position. With ``adapt_to_pi`` the state is converted into pi's space
and the actions back. The constants are ALOHA's and Interbotix's, as openpi states them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .units import Fn

FLIP = np.array([1, -1, -1, 1, 1, 1, 1] * 2, dtype=np.float64)  # per arm: waist, shoulder, elbow, ..., gripper
GRIPPERS = [6, 13]
DIM = 14

# ALOHA's puppet gripper, (closed, open): finger positions (m) and gripper joint angles (rad). openpi
# examples/aloha_real/constants.py PUPPET_GRIPPER_POSITION_CLOSE/_OPEN and PUPPET_GRIPPER_JOINT_CLOSE/_OPEN.
POSITION_CLOSED_OPEN = (0.01844, 0.05800)
JOINT_CLOSED_OPEN = (-0.6213, 1.4910)
# Interbotix gripper linkage (m) and pi's normalized angular range (rad) of encoder counts 2405..3110.
ARM_LENGTH, HORN_RADIUS = 0.036, 0.022
PI_ANGLE_RANGE = (0.5476, 1.6296)


def _to_unit(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return (x - lo) / (hi - lo)


def _from_unit(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return x * (hi - lo) + lo


def gripper_to_angular(value: np.ndarray) -> np.ndarray:
    """ALOHA's normalized linear gripper position → pi's normalized gripper angle."""
    linear = _from_unit(value, *POSITION_CLOSED_OPEN)
    # Inverse of Interbotix's angle → linear conversion (law of cosines over the horn and the arm).
    ratio = (HORN_RADIUS**2 + linear**2 - ARM_LENGTH**2) / (2 * HORN_RADIUS * linear)
    return _to_unit(np.arcsin(np.clip(ratio, -1.0, 1.0)), *PI_ANGLE_RANGE)


def gripper_from_angular(value: np.ndarray) -> np.ndarray:
    """pi's gripper output → ALOHA's normalized gripper joint command."""
    return _to_unit(value + PI_ANGLE_RANGE[0], *JOINT_CLOSED_OPEN)


def state_in(state: np.ndarray) -> np.ndarray:
    out = FLIP * state
    out[GRIPPERS] = gripper_to_angular(out[GRIPPERS])
    return out


def actions_out(actions: np.ndarray) -> np.ndarray:
    out = FLIP * actions[..., :DIM]
    out[..., GRIPPERS] = gripper_from_angular(out[..., GRIPPERS])
    return out


def actions_in(actions: np.ndarray) -> np.ndarray:
    """The inverse of ``actions_out``: dataset-space actions → pi's space (openpi's ``_encode_actions_inv``, what
    ``AlohaInputs`` applies to training data)."""
    out = FLIP * actions[..., :DIM]
    out[..., GRIPPERS] = _from_unit(out[..., GRIPPERS], *JOINT_CLOSED_OPEN) - PI_ANGLE_RANGE[0]
    return out


# Converters (conversions.py): what ALOHA's driver does around the normalized gripper (openpi
# examples/aloha_real/real_env.py: ``set_gripper_pose`` sends PUPPET_GRIPPER_JOINT_UNNORMALIZE_FN(command) to the
# gripper joint; ``get_qpos`` reports PUPPET_GRIPPER_POSITION_NORMALIZE_FN(finger position)).
def gripper_joint_converter(args: Sequence[float] = ()) -> tuple[Fn, Fn]:
    """(normalized → gripper joint rad, gripper joint rad → normalized)."""
    return (lambda x: _from_unit(x, *JOINT_CLOSED_OPEN)), (lambda x: _to_unit(x, *JOINT_CLOSED_OPEN))


def gripper_position_converter(args: Sequence[float] = ()) -> tuple[Fn, Fn]:
    """(normalized → finger position m, finger position m → normalized)."""
    return (lambda x: _from_unit(x, *POSITION_CLOSED_OPEN)), (lambda x: _to_unit(x, *POSITION_CLOSED_OPEN))
