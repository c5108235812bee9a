"""The MuJoCo ALOHA scenes of gym-aloha, driven step by step (no gym env: it renders three cameras a step).

``AlohaPhysics`` loads a task's joint-space scene (position actuators on the 12 arm joints and 4 fingers) or
its end-effector scene (mocap bodies welded to the grippers, for the scripted expert), places the objects a
seed draws (gym-aloha's ``sample_box_pose`` / ``sample_insertion_pose``), steps DT at a time and renders a
camera only when asked. Reward 4 is success (gym-aloha's contact rules).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

os.environ.setdefault("MUJOCO_GL", "egl")  # before dm_control imports MuJoCo's renderer

import mujoco as mj  # noqa: E402
import numpy as np  # noqa: E402
from dm_control import mujoco  # noqa: E402
from dm_control.rl.control import PhysicsError  # noqa: E402
from gym_aloha.constants import ASSETS_DIR  # noqa: E402
from gym_aloha.utils import sample_box_pose, sample_insertion_pose  # noqa: E402

from .units import ARM_JOINTS, ARMS, DT, FINGER_CLOSED_M, START_ARM, START_FINGER_M, finger_to_normalized  # noqa: E402

CAMERAS = ("top", "left_wrist", "right_wrist", "angle", "front_close", "left_pillar", "right_pillar")
SUCCESS_REWARD = 4
# The mocap weld's torque scale (eq_data[10]). At gym-aloha's 1 the grippers lag the waypoints' orientation
# on MuJoCo 3.x and ACT's transfer-cube waypoints miss the cube; 4 tracks them (DESIGN.md section 9).
WELD_TORQUE_SCALE = 4.0


@dataclass(frozen=True)
class Task:
    name: str
    joint_xml: str
    ee_xml: str
    objects: tuple[str, ...]  # free bodies' joint names, in qpos order after the 16 robot values

    def object_poses(self, seed: int) -> np.ndarray:
        """[n_objects, 7] positions + quaternions (w, x, y, z) a seed draws, as gym-aloha draws them."""
        if self.name == "transfer_cube":
            return np.asarray(sample_box_pose(seed), dtype=np.float64)[None]
        peg, socket = sample_insertion_pose(seed)
        return np.stack([np.asarray(peg, np.float64), np.asarray(socket, np.float64)])


TASKS = {
    "transfer_cube": Task("transfer_cube", "bimanual_viperx_transfer_cube.xml",
                          "bimanual_viperx_end_effector_transfer_cube.xml", ("red_box_joint",)),
    "insertion": Task("insertion", "bimanual_viperx_insertion.xml", "bimanual_viperx_end_effector_insertion.xml",
                      ("red_peg_joint", "blue_socket_joint")),
}  # fmt: skip


def task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown ALOHA task {name!r}; choose one of {sorted(TASKS)}") from None


class AlohaPhysics:
    """One scene. ``end_effector``: the mocap variant (grippers follow ``set_mocap``; arm actuators absent)."""

    def __init__(self, task_name: str = "transfer_cube", end_effector: bool = False, fast_render: bool = False) -> None:
        self.task = task(task_name)
        self.end_effector = end_effector
        xml = self.task.ee_xml if end_effector else self.task.joint_xml
        self.physics = mujoco.Physics.from_xml_path(str(ASSETS_DIR / xml))
        model = self.physics.model
        if end_effector:
            model.eq_data[:, 10] = WELD_TORQUE_SCALE
        if fast_render:  # before the first render creates the context: no shadows, no anti-aliasing
            model.vis.quality.shadowsize = 0
            model.vis.quality.offsamples = 0
        self.substeps = max(1, round(DT / model.opt.timestep))
        self.arm_qpos = [model.name2id(f"vx300s_{arm}/{j}", "joint") for arm in ARMS for j in ARM_JOINTS]
        self.finger_qpos = [model.jnt_qposadr[model.name2id(f"vx300s_{arm}/left_finger", "joint")] for arm in ARMS]
        self.arm_qpos = [int(model.jnt_qposadr[i]) for i in self.arm_qpos]
        self._geom_names = [model.id2name(i, "geom") for i in range(model.ngeom)]
        self.steps = 0

    # ------------------------------------------------------------------------------------------ episode
    def reset(self, seed: int) -> None:
        """The robot at its start pose (grippers nearly closed), the objects where ``seed`` puts them."""
        data = self.physics.data
        robot = np.array([*START_ARM, START_FINGER_M, -START_FINGER_M] * 2)
        poses = self.task.object_poses(seed)
        with self.physics.reset_context():
            data.qpos[:16] = robot
            for joint, pose in zip(self.task.objects, poses):
                adr = self.physics.model.jnt_qposadr[self.physics.model.name2id(joint, "joint")]
                data.qpos[adr : adr + 7] = pose
            if self.end_effector:
                # The mocap bodies where the grippers are at the start pose (ACT's ee_sim_env numbers), the
                # grippers commanded closed.
                data.mocap_pos[0], data.mocap_pos[1] = [-0.31718881, 0.5, 0.29525084], [0.31718881, 0.49999888, 0.29525084]
                data.mocap_quat[:] = [1.0, 0.0, 0.0, 0.0]
                data.ctrl[:] = [FINGER_CLOSED_M, -FINGER_CLOSED_M] * 2
            else:
                data.ctrl[:] = robot
        self.steps = 0

    def object_poses(self) -> np.ndarray:
        """[n_objects, 7] where the task's objects are now."""
        model, qpos = self.physics.model, self.physics.data.qpos
        adrs = [model.jnt_qposadr[model.name2id(j, "joint")] for j in self.task.objects]
        return np.stack([qpos[a : a + 7].copy() for a in adrs])

    # ----------------------------------------------------------------------------------------- commands
    def set_arm_targets(self, positions: np.ndarray) -> None:
        """12 joint targets (left arm, right arm) for the arms' position actuators (joint-space scene)."""
        if self.end_effector:
            raise ValueError("the end-effector scene moves its arms through set_mocap")
        p = np.asarray(positions, dtype=np.float64)
        self.physics.data.ctrl[[0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13]] = p

    def set_finger_targets(self, left_m: float, right_m: float) -> None:
        """Each gripper's finger position target (m); the other finger mirrors it (ALOHA's linkage)."""
        ctrl = self.physics.data.ctrl
        first = 0 if self.end_effector else 6
        second = 2 if self.end_effector else 14
        ctrl[first : first + 2] = [left_m, -left_m]
        ctrl[second : second + 2] = [right_m, -right_m]

    def set_mocap(self, left_pose: np.ndarray, right_pose: np.ndarray) -> None:
        """Gripper poses (xyz + quaternion w, x, y, z) for the end-effector scene's welds."""
        data = self.physics.data
        for i, pose in enumerate((left_pose, right_pose)):
            data.mocap_pos[i] = pose[:3]
            data.mocap_quat[i] = np.asarray(pose[3:7]) / np.linalg.norm(pose[3:7])

    def step(self) -> None:
        """Advance one control step (DT) of physics with the current targets."""
        self.physics.step(self.substeps)
        self.steps += 1

    # ------------------------------------------------------------------------------------------ reading
    def arm_positions(self) -> np.ndarray:
        """12 arm joint angles (rad): left waist … wrist_rotate, right waist … wrist_rotate."""
        return self.physics.data.qpos[self.arm_qpos].copy()

    def finger_positions(self) -> np.ndarray:
        """Each gripper's (left) finger position in metres: [left gripper, right gripper]."""
        return self.physics.data.qpos[self.finger_qpos].copy()

    def dataset_state(self) -> np.ndarray:
        """14 values as ALOHA's datasets and openpi's real_env report them: per arm six joints (rad) and the
        gripper's finger position normalized (0 closed, 1 open), left arm first."""
        arms, fingers = self.arm_positions(), finger_to_normalized(self.finger_positions())
        return np.concatenate([arms[:6], fingers[:1], arms[6:], fingers[1:]])

    def mocap_poses(self) -> tuple[np.ndarray, np.ndarray]:
        """The mocap bodies' poses (xyz + quaternion w, x, y, z) the grippers are welded to: left, right."""
        data = self.physics.data
        return tuple(np.concatenate([data.mocap_pos[i], data.mocap_quat[i]]) for i in range(2))  # type: ignore[return-value]

    def contacts(self) -> set[tuple[str, str]]:
        data = self.physics.data
        names = self._geom_names
        return {(names[c.geom1], names[c.geom2]) for c in data.contact[: data.ncon]}

    def reward(self) -> int:
        """gym-aloha's staged reward of the task (4 = success)."""
        pairs = self.contacts()
        touches = lambda a, b: (a, b) in pairs or (b, a) in pairs  # noqa: E731
        if self.task.name == "transfer_cube":
            left = touches("red_box", "vx300s_left/10_left_gripper_finger")
            right = touches("red_box", "vx300s_right/10_right_gripper_finger")
            table = touches("red_box", "table")
            stages = (right, right and not table, left, left and not table)
        else:
            sockets = [f"socket-{i}" for i in range(1, 5)]
            left = any(touches(s, "vx300s_left/10_left_gripper_finger") for s in sockets)
            right = touches("red_peg", "vx300s_right/10_right_gripper_finger")
            lifted = not touches("red_peg", "table") and not any(touches(s, "table") for s in sockets)
            in_socket = any(touches("red_peg", s) for s in sockets)
            stages = (left and right, left and right and lifted, in_socket and lifted, touches("red_peg", "pin"))
        return max((i + 1 for i, reached in enumerate(stages) if reached), default=0)

    def render(self, camera: str, height: int = 224, width: int = 224) -> np.ndarray:
        """One camera's RGB image (uint8, height × width × 3): about 70-90 ms on Mesa's CPU renderer."""
        if camera not in CAMERAS:
            raise ValueError(f"unknown camera {camera!r}; choose one of {list(CAMERAS)}")
        return self.physics.render(height=height, width=width, camera_id=camera)


# MuJoCo's instability warnings; each one's ``lastinfo`` is the index of the offending DOF (QACC, QVEL) or qpos.
_BAD_STATE = {mj.mjtWarning.mjWARN_BADQACC: "dof", mj.mjtWarning.mjWARN_BADQVEL: "dof", mj.mjtWarning.mjWARN_BADQPOS: "qpos"}


def unstable_joint(scene: AlohaPhysics, prefixes: tuple[str, str] = ("left_", "right_")) -> str | None:
    """The joint MuJoCo last found unstable (a NaN, Inf or huge acceleration, velocity or position), named as the
    driver names it (``right_shoulder``; an object's joint by its own name), or None when no warning says."""
    model, warnings = scene.physics.model, scene.physics.data.warning
    for warning, kind in _BAD_STATE.items():
        if warnings.number[int(warning)] == 0:
            continue
        index = int(warnings.lastinfo[int(warning)])
        joint = int(model.dof_jntid[index]) if kind == "dof" else int(np.searchsorted(model.jnt_qposadr, index, side="right") - 1)
        name = model.id2name(joint, "joint")
        for arm, prefix in zip(ARMS, prefixes):
            name = name.replace(f"vx300s_{arm}/", prefix)
        return name
    return None


class SceneUnstable(PhysicsError):
    """MuJoCo found the scene unstable during a step: ``failure`` says when and where (an episode's outcome)."""

    def __init__(self, failure: dict) -> None:
        super().__init__(failure["message"])
        self.failure = failure


def physics_failure(scene: AlohaPhysics, step: int, exc: PhysicsError, prefixes: tuple[str, str] = ("left_", "right_")) -> dict:
    """An episode's outcome for MuJoCo's ``PhysicsError`` at ``step`` (1-based): reason, step, joint, message."""
    return {"reason": "physics_error", "step": step, "joint": unstable_joint(scene, prefixes), "message": str(exc)}
