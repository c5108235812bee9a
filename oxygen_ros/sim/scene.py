"""The table-top scene: a 3-joint arm with a parallel gripper, 2-4 coloured objects, grasp physics.

World frame: x forward from the arm's base, y to the arm's left, z up; the table top is z = 0 (metres).
The arm: a base yaw joint, a shoulder and an elbow (both pitch), and a tool that a parallelogram linkage
keeps vertical (as on palletizing arms), ending in two fingers whose opening is the gripper joint.

The table is solid: a motion that would push the fingertips below the table top stops where they touch it
(the arm is blocked as a position-controlled arm on a real table is).

Grasping is decided by geometry, never by the instruction: an object is held only when the fingertips
are low around it (inside its height band, centred within GRASP_TOLERANCE_M), the fingers were open wider
than the object when they got there, and they then close on it. A held object keeps its offset to the
fingertips and stops the fingers at its width; opening the fingers past it drops it onto the table.
Nothing here imports ROS or renders: see `render.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# --------------------------------------------------------------------------------------- the robot
JOINT_NAMES = ("arm_yaw", "arm_shoulder", "arm_elbow", "gripper")
ARM_JOINTS = 3
STATE_DIM = len(JOINT_NAMES)  # joint positions (rad) + gripper opening (m)
JOINT_LOWER = np.array([-1.6, -0.4, -2.8, 0.0])
JOINT_UPPER = np.array([1.6, 1.6, 0.0, 0.08])
MAX_VELOCITY = np.array([1.2, 1.2, 1.5, 0.12])  # rad/s, m/s
SHOULDER_HEIGHT_M = 0.22
UPPER_ARM_M = 0.28
FOREARM_M = 0.28
TOOL_M = 0.12  # wrist to fingertip centre, always vertical
GRIPPER_OPEN_M = 0.08

# ---------------------------------------------------------------------------------------- objects
COLOURS = ("red", "blue", "green", "yellow")
KINDS = ("cup", "block", "ball")
# kind -> (width across the fingers, height) in metres
KIND_SIZE = {"cup": (0.06, 0.08), "block": (0.05, 0.05), "ball": (0.05, 0.05)}
MIN_OBJECTS, MAX_OBJECTS = 2, 4
# Objects stand on a 2 x 3 grid of places (rows at a distance x from the base, columns across it at y),
# each jittered by up to 1 cm: which place holds the named object is only visible in the camera images, and a
# small policy can learn it (where free placement left a behaviour-cloned few-M-parameter policy wandering).
# A rectangular grid (not rings of equal reach) lets the base camera give every place its own image patch
# (see render.BASE_CAMERA). Places are >= 13 cm apart, so the open fingers never straddle two objects.
PLACE_ROWS_M = (0.28, 0.42)  # x: near, far
PLACE_COLUMNS_M = (0.15, 0.0, -0.15)  # y: left, centre, right (seen from the base)
PLACE_JITTER_M = 0.01

# -------------------------------------------------------------------------------------- grasping
GRASP_TOLERANCE_M = 0.02  # fingertip centre to object axis, horizontally
RELEASE_MARGIN_M = 0.001  # fingers commanded wider than the object (plus this) let it go
LIFT_SUCCESS_M = 0.06  # the held object's bottom this high above the table = success
TABLE_Z = 0.0  # the table top: the fingertips never go below it


@dataclass
class SceneObject:
    colour: str
    kind: str
    position: np.ndarray  # [3]: centre of the footprint (x, y) and bottom height z

    @property
    def name(self) -> str:
        return f"{self.colour} {self.kind}"

    @property
    def width(self) -> float:
        return KIND_SIZE[self.kind][0]

    @property
    def height(self) -> float:
        return KIND_SIZE[self.kind][1]


_LOWER, _UPPER = JOINT_LOWER.tolist(), JOINT_UPPER.tolist()
_ARM_LOWER, _ARM_UPPER = _LOWER[:ARM_JOINTS], _UPPER[:ARM_JOINTS]


def clipped(q: list[float]) -> list[float]:
    """Joint values [STATE_DIM] clipped to the joint limits (np.clip's result on Python floats: the physics and
    the expert call this every substep, where numpy's dispatch costs more than the arithmetic)."""
    return [min(max(v, lo), hi) for v, lo, hi in zip(q, _LOWER, _UPPER)]


def _arm_plane(q: np.ndarray) -> tuple[float, float, float, float, float]:
    """(yaw, elbow reach r1, elbow height z1, wrist reach r2, wrist height z2) in the arm's vertical plane."""
    yaw, shoulder, elbow = float(q[0]), float(q[1]), float(q[2])
    r1, z1 = UPPER_ARM_M * math.cos(shoulder), SHOULDER_HEIGHT_M + UPPER_ARM_M * math.sin(shoulder)
    r2, z2 = r1 + FOREARM_M * math.cos(shoulder + elbow), z1 + FOREARM_M * math.sin(shoulder + elbow)
    return yaw, r1, z1, r2, z2


def forward_kinematics(q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(elbow, wrist, fingertip centre) positions in the world for joint positions q (first 3 used)."""
    yaw, r1, z1, r2, z2 = _arm_plane(q)
    c, s = math.cos(yaw), math.sin(yaw)
    elbow_p = np.array([r1 * c, r1 * s, z1])
    wrist = np.array([r2 * c, r2 * s, z2])
    return elbow_p, wrist, wrist - np.array([0.0, 0.0, TOOL_M])


def fingertip(q: np.ndarray) -> np.ndarray:
    """The fingertip centre alone (``forward_kinematics``' third point, without building the other two)."""
    return np.array(tip_xyz(q))


def tip_xyz(q: np.ndarray | list[float]) -> tuple[float, float, float]:
    """``fingertip`` as Python floats (the physics and the expert call it every substep)."""
    yaw, _, _, r2, z2 = _arm_plane(q)
    return r2 * math.cos(yaw), r2 * math.sin(yaw), z2 - TOOL_M


def inverse_kinematics(tip: np.ndarray) -> np.ndarray | None:
    """Arm joints (yaw, shoulder, elbow) that put the fingertip centre at ``tip``; None if unreachable."""
    joints = arm_joints_for(float(tip[0]), float(tip[1]), float(tip[2]))
    return None if joints is None else np.array(joints)


def arm_joints_for(x: float, y: float, z: float) -> tuple[float, float, float] | None:
    """``inverse_kinematics`` on Python floats."""
    r = math.hypot(x, y)
    d = z + TOOL_M - SHOULDER_HEIGHT_M
    c2 = (r * r + d * d - UPPER_ARM_M**2 - FOREARM_M**2) / (2 * UPPER_ARM_M * FOREARM_M)
    if not -1.0 <= c2 <= 1.0:
        return None
    elbow = -math.acos(c2)  # elbow above the line shoulder-wrist
    shoulder = math.atan2(d, r) - math.atan2(FOREARM_M * math.sin(elbow), UPPER_ARM_M + FOREARM_M * math.cos(elbow))
    joints = (math.atan2(y, x), shoulder, elbow)
    if any(not lo <= v <= hi for v, lo, hi in zip(joints, _ARM_LOWER, _ARM_UPPER)):
        return None
    return joints


@dataclass
class Scene:
    """The world's true state. ``apply`` moves the robot to new joint positions and runs the grasp physics."""

    objects: list[SceneObject]
    q: np.ndarray  # [STATE_DIM]: what the joint encoders report (the gripper stops at a held object)
    held: int | None = None
    seed: int = -1
    _offset: np.ndarray = field(default_factory=lambda: np.zeros(3))  # held object's bottom centre - fingertip
    _straddling: set[int] = field(default_factory=set)  # objects the open fingers are around
    _tip: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self._tip = fingertip(self.q)

    # ------------------------------------------------------------------------------------ creation
    @classmethod
    def random(cls, seed: int, num_objects: int | None = None) -> "Scene":
        """A scene drawn from ``seed``: 2-4 objects (or ``num_objects``, 1-4; more raise ValueError) of distinct
        colours on distinct places, a random start pose."""
        if num_objects is not None and not 1 <= num_objects <= MAX_OBJECTS:
            raise ValueError(f"num_objects {num_objects}: the scene generator places 1 to {MAX_OBJECTS} objects "
                             f"(one per colour); a distractor adds one more")
        rng = np.random.default_rng(seed)
        n = int(rng.integers(MIN_OBJECTS, MAX_OBJECTS + 1)) if num_objects is None else num_objects
        colours = rng.permutation(len(COLOURS))[:n]
        places = [(x, y) for x in PLACE_ROWS_M for y in PLACE_COLUMNS_M]
        positions = []
        for k in rng.permutation(len(places))[:n]:
            jitter = rng.uniform(-PLACE_JITTER_M, PLACE_JITTER_M, 2)
            positions.append(np.array([places[k][0] + jitter[0], places[k][1] + jitter[1], 0.0]))
        objects = [SceneObject(COLOURS[c], KINDS[int(rng.integers(len(KINDS)))], p) for c, p in zip(colours, positions)]
        start = None
        margin = 0.15  # rad inside the joint limits, so the first motions have room
        while start is None:  # a start pose with the fingertips above the objects' heights
            r, yaw, z = rng.uniform(0.18, 0.36), rng.uniform(-0.9, 0.9), rng.uniform(0.13, 0.24)
            start = inverse_kinematics(np.array([r * math.cos(yaw), r * math.sin(yaw), z]))
            if start is not None and (np.any(start < JOINT_LOWER[:ARM_JOINTS] + margin) or np.any(start > JOINT_UPPER[:ARM_JOINTS] - margin)):
                start = None
        q = np.concatenate([start, [rng.uniform(0.045, GRIPPER_OPEN_M)]])
        return cls(objects, q, seed=seed)

    def copy(self) -> "Scene":
        objects = [SceneObject(o.colour, o.kind, o.position.copy()) for o in self.objects]
        return Scene(objects, self.q.copy(), self.held, self.seed, self._offset.copy(), set(self._straddling))

    # ------------------------------------------------------------------------------------- queries
    def find(self, name: str) -> int | None:
        """Index of the object called ``name`` ("red cup"), or None when the scene has none."""
        return next((i for i, o in enumerate(self.objects) if o.name == name), None)

    @property
    def tip(self) -> np.ndarray:
        """The fingertip centre (world, metres)."""
        return self._tip

    def straddling(self, index: int) -> bool:
        return index in self._straddling

    def lifted(self, index: int | None) -> bool:
        """Success test: the object is held and its bottom is LIFT_SUCCESS_M above the table."""
        return index is not None and self.held == index and self.objects[index].position[2] >= LIFT_SUCCESS_M

    def in_grasp_zone(self, index: int, tip: np.ndarray | None = None) -> bool:
        """Fingertips centred on the object (horizontally) and inside its height band."""
        return self._in_grasp_zone(index, *(self.tip if tip is None else tip).tolist())

    def _in_grasp_zone(self, index: int, x: float, y: float, z: float) -> bool:
        o = self.objects[index]
        ox, oy, oz = o.position.tolist()
        return math.hypot(x - ox, y - oy) < GRASP_TOLERANCE_M and oz + 0.003 <= z <= oz + o.height - 0.005

    # --------------------------------------------------------------------------------------- physics
    # Called every 20-ms substep by the simulator and by every expert rollout: the arithmetic runs on Python
    # floats (the same operations in the same order as numpy would do them, so the same bits), as numpy's
    # per-call cost on 3- and 4-vectors was most of the expert's time.
    def _blocked_by_table(self, q: list[float]) -> list[float]:
        """``q`` when its fingertips are above the table, else the furthest pose on the way from the current
        pose towards ``q`` that is (the table stops the arm; the gripper still moves)."""
        if tip_xyz(q)[2] >= TABLE_Z:
            return q
        start, arm = self.q[:ARM_JOINTS], np.array(q[:ARM_JOINTS])
        if fingertip(start)[2] < TABLE_Z:  # already below (a start pose never is): stay
            return [*start.tolist(), *q[ARM_JOINTS:]]
        lo, hi = 0.0, 1.0
        for _ in range(12):  # bisection on the straight joint-space path: ~0.02 % of the step
            mid = 0.5 * (lo + hi)
            if fingertip(start + mid * (arm - start))[2] >= TABLE_Z:
                lo = mid
            else:
                hi = mid
        return [*(start + lo * (arm - start)).tolist(), *q[ARM_JOINTS:]]

    def apply(self, command: np.ndarray | list[float]) -> None:
        """Move to commanded joint positions (already rate-limited by the follower) and update grasps."""
        values = command.tolist() if isinstance(command, np.ndarray) else [float(v) for v in command]
        q = self._blocked_by_table(clipped(values))
        tip = tip_xyz(q)
        width = q[3]
        if self.held is not None:
            o = self.objects[self.held]
            if width > o.width + RELEASE_MARGIN_M:  # let go: it drops onto the table where it is
                o.position = np.array([o.position[0], o.position[1], 0.0])
                self.held = None
            else:
                q[3] = o.width  # the fingers stop at the object
                o.position = np.array(tip) + self._offset
                o.position[2] = max(o.position[2], 0.0)
        if self.held is None:
            for i in range(len(self.objects)):
                if not self._in_grasp_zone(i, *tip):
                    self._straddling.discard(i)
                elif width > self.objects[i].width:
                    self._straddling.add(i)
                elif i in self._straddling:  # the fingers closed around it: it is held
                    self.held = i
                    self._offset = self.objects[i].position - np.array(tip)
                    q[3] = self.objects[i].width
                    self._straddling.clear()
                    break
        self.q = np.array(q)
        self._tip = np.array(tip)
