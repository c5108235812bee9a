"""The scripted expert: solves the pick-up task from the TRUE state, and names what it is doing.

A feedback law in Cartesian space (straight-line fingertip motion at a capped speed, inverse kinematics,
joint velocity limits) with three subtasks decided from the state alone, so it corrects any state it finds
itself in (what DAgger-style data collection needs):

* "move to the X": fingers open, go above X (rising first when low and far from it);
* "grasp the X":   once centred above X: open if needed, centre, descend into X's height band, close;
* "lift the X":    once X is held: raise it.

An action chunk is the expert's own rollout from the current state on a copy of the scene with ideal
tracking: the joint command at t + (i + 1)·period for i < horizon. The texts: the current subtask for the
language stream, a scene note for the memory stream ("red cup left of the blue block"), and where the named
object stands as seen from the robot ("far left"), a localization target the policy is co-trained on.
"""

from __future__ import annotations

import math

import numpy as np

from .scene import (
    ARM_JOINTS, COLOURS, GRIPPER_OPEN_M, KINDS, MAX_VELOCITY, PLACE_COLUMNS_M, PLACE_ROWS_M, Scene, SceneObject,
    arm_joints_for, clipped,
)  # fmt: skip

SUBTASKS = ("move to the {}", "grasp the {}", "lift the {}")
ABSENT_TEXT = "no {} here"  # the narration when the named object is not in the scene
RELATIONS = ("left of", "right of", "in front of", "behind")
INSTRUCTION_TEMPLATES = ("pick up the {}", "grab the {}", "get me the {}")

PRE_GRASP_Z = 0.13  # fingertip height when moving above the objects
LIFT_Z = 0.17  # fingertip height the expert lifts to
CART_SPEED = 0.22  # m/s of the fingertip
GRASP_PHASE_M = 0.015  # horizontal distance at which "move to" becomes "grasp"
GRASP_DEPTH_M = 0.015  # fingertips this high above the object's bottom when closing
CENTRED_M = 0.006  # centred enough to descend
SLOW_LIFT_M, SLOW_LIFT_SPEED = 0.02, 0.05  # the first 2 cm of a lift are slow
SUBSTEP_S = 0.02  # the expert's (and the simulator's) physics step


def object_names() -> list[str]:
    return [f"{c} {k}" for c in COLOURS for k in KINDS]


def grasp_height(scene: Scene, index: int) -> float:
    o = scene.objects[index]
    return float(o.position[2] + GRASP_DEPTH_M)


def subtask_index(scene: Scene, target: int | None) -> int | None:
    """0 move to, 1 grasp, 2 lift; None without a target (the named object is not in the scene)."""
    if target is None:
        return None
    if scene.held == target:
        return 2
    return 1 if _xy_distance(scene.tip, scene.objects[target].position) < GRASP_PHASE_M else 0


def _xy_distance(a: np.ndarray, b: np.ndarray) -> float:
    (ax, ay), (bx, by) = a[:2].tolist(), b[:2].tolist()
    return math.hypot(ax - bx, ay - by)


def subtask_text(scene: Scene, target: int | None, name: str | None = None) -> str | None:
    """The current subtask; "no red cup here" when the named object ``name`` is not in the scene."""
    i = subtask_index(scene, target)
    if i is None:
        return ABSENT_TEXT.format(name) if name else None
    return SUBTASKS[i].format(scene.objects[target].name)  # type: ignore[index]


def scene_listing(scene: Scene) -> str:
    """What is on the table, left to right and near to far as the robot sees it: "red cup, blue ball"."""
    order = sorted(scene.objects, key=lambda o: (-round(float(o.position[1]) / 0.075), float(o.position[0])))
    return ", ".join(o.name for o in order)


def place_of(obj: SceneObject) -> tuple[int, int]:
    """The (row, column) of the grid place nearest to where ``obj`` stands: row 0 near, 1 far; column 0 the
    robot's left, 1 centre, 2 right (beyond the grid: the next indices on)."""
    x, y = (float(v) for v in obj.position[:2])
    row_pitch = PLACE_ROWS_M[1] - PLACE_ROWS_M[0]
    column_pitch = PLACE_COLUMNS_M[0] - PLACE_COLUMNS_M[1]
    return round((x - PLACE_ROWS_M[0]) / row_pitch), round((PLACE_COLUMNS_M[0] - y) / column_pitch)


def memory_neighbour(scene: Scene, target: int) -> int | None:
    """The index of the object the memory note relates ``target`` to: its nearest neighbour, counted in places,
    not centimetres (see ``memory_text``); None when ``target`` stands alone."""
    row, column = place_of(scene.objects[target])

    def order(i: int) -> tuple[int, int, int]:
        r, c = place_of(scene.objects[i])
        return (r - row) ** 2 + (c - column) ** 2, abs(r - row), c

    others = [i for i in range(len(scene.objects)) if i != target]
    return min(others, key=order) if others else None


def memory_text(scene: Scene, target: int | None, name: str | None = None) -> str | None:
    """Where the named object is relative to its nearest neighbour, from the robot's point of view; when the
    named object ``name`` is absent, what is there instead.

    Nearest counts places, not centimetres: the neighbour on the next place of the same row (left or right)
    or of the same column (behind or in front) before a diagonal one, before one two places away; the same
    row first, then the robot's left side. In metres the first two are 14 and 15 cm away, and the 1-cm
    jitter would decide between them, which no camera can see."""
    if target is None:
        return scene_listing(scene) if name else None
    neighbour = memory_neighbour(scene, target)
    if neighbour is None:
        return None
    t, other = scene.objects[target], scene.objects[neighbour]
    row, column = place_of(t)
    r, c = place_of(other)
    if c != column:
        relation = "left of" if c > column else "right of"
    elif r != row:
        relation = "behind" if row > r else "in front of"
    else:  # on one place (one is being carried over the other): as the positions say
        dx, dy = (t.position[:2] - other.position[:2]).tolist()
        relation = ("left of" if dy > 0 else "right of") if abs(dy) >= abs(dx) else ("behind" if dx > 0 else "in front of")
    return f"{t.name} {relation} the {other.name}"


def _goal(scene: Scene, target: int, phase: int) -> tuple[tuple[float, float, float], float]:
    """The fingertip goal and the gripper command of the expert's current subtask ``phase``."""
    tx, ty, tz = scene.tip.tolist()
    obj = scene.objects[target]
    ox, oy, oz = obj.position.tolist()
    if phase == 2:
        return (tx, ty, LIFT_Z), 0.0
    if phase == 0:
        far = math.hypot(tx - ox, ty - oy) > 2 * GRASP_PHASE_M
        if far and tz < PRE_GRASP_Z - 0.03:  # rise before crossing the table
            return (tx, ty, PRE_GRASP_Z), GRIPPER_OPEN_M
        return (ox, oy, PRE_GRASP_Z), GRIPPER_OPEN_M
    straddling = scene.straddling(target)
    top = oz + obj.height
    if not straddling and float(scene.q[3]) < GRIPPER_OPEN_M - 0.004:  # open before going down
        return (ox, oy, max(tz, top + 0.02)), GRIPPER_OPEN_M
    if not straddling and math.hypot(tx - ox, ty - oy) > CENTRED_M:  # centre before going down
        return (ox, oy, max(tz, top + 0.01)), GRIPPER_OPEN_M
    low = grasp_height(scene, target)
    close = straddling and tz <= low + 0.004
    return (ox, oy, low), 0.0 if close else GRIPPER_OPEN_M


_MAX_VELOCITY = MAX_VELOCITY.tolist()


def expert_command(scene: Scene, target: int | None, dt: float) -> np.ndarray:
    """The joint command for the next ``dt`` seconds: arm joints one capped Cartesian step ahead (within
    the velocity limits), the gripper fully open or fully closed (the follower limits its speed)."""
    if target is None:
        return scene.q.copy()
    return np.array(_command(scene, target, dt))


def _command(scene: Scene, target: int, dt: float) -> list[float]:
    """``expert_command`` on Python floats (every rollout substep calls it; the same operations in the same
    order as on numpy vectors, so the same bits, at a fraction of numpy's per-call cost)."""
    q = scene.q.tolist()
    tx, ty, tz = scene.tip.tolist()
    phase = subtask_index(scene, target)
    (gx, gy, gz), grip = _goal(scene, target, phase)
    dx, dy, dz = gx - tx, gy - ty, gz - tz
    speed = CART_SPEED
    if phase == 2 and tz < grasp_height(scene, target) + SLOW_LIFT_M:
        speed = SLOW_LIFT_SPEED  # let the fingers settle on the object before pulling
    dist = math.sqrt(dx * dx + dy * dy + dz * dz)
    if dist > speed * dt:
        scale = speed * dt / dist
        dx, dy, dz = dx * scale, dy * scale, dz * scale
    arm = arm_joints_for(tx + dx, ty + dy, tz + dz)
    if arm is None:  # at the edge of the workspace or a joint limit: back towards its middle first
        mx, my, mz = 0.33 * math.cos(q[0]) - tx, 0.33 * math.sin(q[0]) - ty, PRE_GRASP_Z - tz
        scale = min(1.0, speed * dt / max(math.sqrt(mx * mx + my * my + mz * mz), 1e-9))
        arm = arm_joints_for(tx + mx * scale, ty + my * scale, tz + mz * scale)
    command = q.copy()
    if arm is not None:
        for j in range(ARM_JOINTS):
            limit = _MAX_VELOCITY[j] * dt
            command[j] = q[j] + min(max(arm[j] - q[j], -limit), limit)
    command[3] = grip
    return clipped(command)


def track(q: np.ndarray, command: np.ndarray, dt: float) -> np.ndarray:
    """Where the joints get in ``dt`` towards ``command`` at their velocity limits (the follower's law)."""
    return np.array(_tracked(np.asarray(q, dtype=np.float64).tolist(), np.asarray(command, dtype=np.float64).tolist(), dt))


def _tracked(q: list[float], command: list[float], dt: float) -> list[float]:
    """``track`` on Python floats."""
    out = []
    for v, c, m in zip(q, command, _MAX_VELOCITY):
        limit = m * dt
        out.append(v + min(max(c - v, -limit), limit))
    return out


def expert_chunk(scene: Scene, target: int | None, horizon: int, period_s: float) -> np.ndarray:
    """[horizon, STATE_DIM] float32: the expert's joint commands at t + (i + 1)·period (ideal tracking)."""
    sim = scene.copy()
    substeps = max(1, int(round(period_s / SUBSTEP_S)))
    dt = period_s / substeps
    out = np.empty((horizon, len(scene.q)), dtype=np.float32)
    for i in range(horizon):
        for _ in range(substeps):
            command = sim.q.tolist() if target is None else _command(sim, target, dt)
            sim.apply(_tracked(sim.q.tolist(), command, dt))
        out[i] = command
    return out


REACHES = ("near", "far")
SIDES = ("left", "centre", "right")
FAR_X_M = 0.35  # distance in front of the base that separates near from far (between the place rows)
SIDE_Y_M = 0.075  # distance across beyond which an object is to the left (+) or right (-)


def location_text(scene: Scene, target: int | None, name: str | None = None) -> str | None:
    """Where the named object stands, from the robot's base: "near left", "far centre", ..."""
    if target is None:
        return None
    x, y = (float(v) for v in scene.objects[target].position[:2])
    side = SIDES[0] if y > SIDE_Y_M else SIDES[2] if y < -SIDE_Y_M else SIDES[1]
    return f"{REACHES[int(x >= FAR_X_M)]} {side}"


def all_texts(absent: bool = False) -> dict[str, list[str]]:
    """Every text the expert or a plain instruction can produce for present objects (for training a
    tokenizer); with ``absent`` also the narrations for an absent one ("no red cup here")."""
    names = object_names()
    memory = [f"{a} {r} the {b}" for a in names for b in names if a.split()[0] != b.split()[0] for r in RELATIONS]
    return {
        "instruction": [t.format(n) for t in INSTRUCTION_TEMPLATES for n in names],
        "language": [s.format(n) for s in (*SUBTASKS, *((ABSENT_TEXT,) if absent else ())) for n in names],
        "memory": memory,
        "location": [f"{r} {s}" for r in REACHES for s in SIDES],
    }


def instruction_for(name: str, template: int = 0) -> str:
    return INSTRUCTION_TEMPLATES[template % len(INSTRUCTION_TEMPLATES)].format(name)
