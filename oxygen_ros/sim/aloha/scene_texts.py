"""What the MuJoCo ALOHA's transfer-cube scene says in words, from the physics' truth at one instant.

The same functions label the training data and score the policy's texts in evaluation, so a text counts as
right when it says what the scene shows at the frame it was forked from:

* narration (``phase``): "reach the cube", "grasp it with the right arm", "hand it to the left arm",
  "hold it up" — by who holds the cube (``holder``) and, before that, by how far the right gripper's fingers
  are from it;
* memory note (``memory_note``): where the cube stands on the table ("cube on the table, back left"), or
  which gripper holds it. The policy reads one frame: before the grasp the note says where the cube started,
  after it which arm holds it;
* answers (``QUESTIONS`` / ``answer``): "which arm holds the cube?" and "where is the cube?".

Places are the halves of gym-aloha's cube range (x 0 … 0.2 m, y 0.4 … 0.6 m): ``left``/``right`` as the top
camera (cam_high) shows them (x < 0.1 m is left), ``back``/``front`` its top and bottom halves (y ≥ 0.5 m is
back).
"""

from __future__ import annotations

import math

import numpy as np

from .physics import AlohaPhysics

PHASES = ("reach the cube", "grasp it with the right arm", "hand it to the left arm", "hold it up")
# Distances from the cube's centre to the midpoint of an arm's finger links (about 8 cm when the fingers
# close on it): the right one closer than GRASP_RANGE_M is the grasp begun (the expert's descent), the left one
# (or the right one) closer than AROUND_M holds the lifted cube. A cube more than LIFTED_Z_M up is off the table (it rests at 2 cm).
GRASP_RANGE_M = 0.15
AROUND_M = 0.11
LIFTED_Z_M = 0.03
PLACE_SPLIT_XY = (0.1, 0.5)  # the middle of gym-aloha's cube range
QUESTIONS = ("which arm holds the cube?", "where is the cube?")
FINGER_BODIES = {arm: (f"vx300s_{arm}/left_finger_link", f"vx300s_{arm}/right_finger_link") for arm in ("left", "right")}


def cube_position(physics: AlohaPhysics) -> np.ndarray:
    return physics.object_poses()[0, :3]


def holder(physics: AlohaPhysics) -> str | None:
    """The arm holding the cube off the table, else None. Geometry, not contacts (the fingers' contacts with a
    held cube flicker from step to step): the cube is lifted and an arm's fingers are around it, the left arm's
    first (from the hand-over's end, where gym-aloha's reward 4 fires)."""
    cube = cube_position(physics)
    if cube[2] < LIFTED_Z_M:
        return None
    for arm in ("left", "right"):
        if np.linalg.norm(fingers_position(physics, arm) - cube) < AROUND_M:
            return arm
    return None  # off the table but in no gripper: falling (it is dropped from 5 cm at the start)


def fingers_position(physics: AlohaPhysics, arm: str) -> np.ndarray:
    """The midpoint of an arm's two finger links (world frame, m)."""
    xpos = physics.physics.named.data.xpos
    return (xpos[FINGER_BODIES[arm][0]] + xpos[FINGER_BODIES[arm][1]]) / 2


def phase(physics: AlohaPhysics) -> str:
    held = holder(physics)
    if held == "left":
        return PHASES[3]
    if held == "right":
        return PHASES[2]
    near = np.linalg.norm(fingers_position(physics, "right") - cube_position(physics)) < GRASP_RANGE_M
    return PHASES[1] if near else PHASES[0]


def place(position: np.ndarray) -> str:
    """"back left", "front right", ...: the half of the cube range a point of the table lies in."""
    x, y = float(position[0]), float(position[1])
    return f"{'back' if y >= PLACE_SPLIT_XY[1] else 'front'} {'left' if x < PLACE_SPLIT_XY[0] else 'right'}"


def where(physics: AlohaPhysics) -> str:
    held = holder(physics)
    return f"in the {held} gripper" if held else f"on the table, {place(cube_position(physics))}"


def memory_note(physics: AlohaPhysics) -> str:
    return f"cube {where(physics)}"


def answer(physics: AlohaPhysics, question: str) -> str:
    """The true answer to one of ``QUESTIONS`` now."""
    if question == QUESTIONS[0]:
        held = holder(physics)
        return f"the {held} arm" if held else "neither arm"
    if question == QUESTIONS[1]:
        return where(physics)
    raise ValueError(f"no answer for {question!r}; the scene answers {list(QUESTIONS)}")


def vocabulary() -> list[str]:
    """Every text the labels can take (for the tokenizer)."""
    places = [f"{r} {c}" for r in ("back", "front") for c in ("left", "right")]
    wheres = [f"on the table, {p}" for p in places] + [f"in the {a} gripper" for a in ("left", "right")]
    return [*PHASES, *QUESTIONS, *wheres, *(f"cube {w}" for w in wheres), "the left arm", "the right arm", "neither arm"]


def project(physics: AlohaPhysics, camera: str, point: np.ndarray) -> tuple[float, float] | None:
    """Where a world point appears in a square image of ``camera``: (u, v) as fractions of its width and
    height from the top-left corner, or None when it is behind the camera or outside the image."""
    data, model = physics.physics.named.data, physics.physics.named.model
    offset = np.asarray(data.cam_xmat[camera]).reshape(3, 3).T @ (np.asarray(point) - data.cam_xpos[camera])
    if offset[2] >= 0:  # MuJoCo's cameras look along their -z axis
        return None
    focal = 0.5 / math.tan(math.radians(float(model.cam_fovy[camera])) / 2)  # in image heights (= widths: square)
    u = 0.5 + focal * offset[0] / -offset[2]
    v = 0.5 - focal * offset[1] / -offset[2]
    return (float(u), float(v)) if 0.0 <= u < 1.0 and 0.0 <= v < 1.0 else None
