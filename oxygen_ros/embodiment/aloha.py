"""openpi's ALOHA transforms (``policies/aloha_policy.py``, ``adapt_to_pi``): two arms of 6 joints + gripper.

pi's runtime, on which the base model was trained, flips two joints per arm and measures the gripper as an
angle; ALOHA measures a linear gripper position. With ``adapt_to_pi`` the state is converted into pi's space
and the actions back. The constants are ALOHA's and Interbotix's, as openpi states them.
"""

from __future__ import annotations

import numpy as np

FLIP = np.array([1, -1, -1, 1, 1, 1, 1] * 2, dtype=np.float64)  # per arm: waist, shoulder, elbow, ..., gripper
GRIPPERS = [6, 13]
DIM = 14

# ALOHA's puppet gripper: linear positions (m) and joint angles (rad) at open/closed.
LINEAR_OPEN_CLOSED = (0.01844, 0.05800)
JOINT_OPEN_CLOSED = (-0.6213, 1.4910)
# Interbotix gripper linkage (m) and pi's normalized angular range (rad) of encoder counts 2405..3110.
ARM_LENGTH, HORN_RADIUS = 0.036, 0.022
PI_ANGLE_RANGE = (0.5476, 1.6296)


def _to_unit(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return (x - lo) / (hi - lo)


def _from_unit(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return x * (hi - lo) + lo


def gripper_to_angular(value: np.ndarray) -> np.ndarray:
    """ALOHA's normalized linear gripper position → pi's normalized gripper angle."""
    linear = _from_unit(value, *LINEAR_OPEN_CLOSED)
    # Inverse of Interbotix's angle → linear conversion (law of cosines over the horn and the arm).
    ratio = (HORN_RADIUS**2 + linear**2 - ARM_LENGTH**2) / (2 * HORN_RADIUS * linear)
    return _to_unit(np.arcsin(np.clip(ratio, -1.0, 1.0)), *PI_ANGLE_RANGE)


def gripper_from_angular(value: np.ndarray) -> np.ndarray:
    """pi's gripper output → ALOHA's normalized gripper joint command."""
    return _to_unit(value + PI_ANGLE_RANGE[0], *JOINT_OPEN_CLOSED)


def state_in(state: np.ndarray) -> np.ndarray:
    out = FLIP * state
    out[GRIPPERS] = gripper_to_angular(out[GRIPPERS])
    return out


def actions_out(actions: np.ndarray) -> np.ndarray:
    out = FLIP * actions[..., :DIM]
    out[..., GRIPPERS] = gripper_from_angular(out[..., GRIPPERS])
    return out
