"""The scripted expert from any state: ACT's transfer-cube waypoints re-planned from where the arms and the cube are.

``expert.expert_episode`` plans once from the start, open loop. To label the states a policy reaches by itself
(DAgger), ``ReplanningExpert.chunk`` copies the joint-space scene (arms, fingers, cube, velocities) into the
end-effector scene, puts the mocap bodies where their welds hold the grippers as they are, and runs the plan's
schedule from there: the welds pull the arms onto the planned path (the expert's correction), with the right
arm's pick at the cube's present place while it is on the table (at the place it was picked from once it is
not). A grasp that missed (the right gripper closed with the cube still on the table) starts the pick again:
the schedule shifts for the rest of the episode so the right arm, opening from where it is, is above the cube
REGRASP_STEPS from now. The joints the end-effector scene goes through are the chunk, as ``expert_episode``
records them. One expert follows one episode at a time (``begin``, then ``chunk`` in step order).

The joint-space scene follows the recorded joints TRACKING_LAG_STEPS behind (the position actuators'
lag: the replayed state at step k is closest to the plan's row k - 3), so a chunk for step k is the
re-planned rollout from step k - TRACKING_LAG_STEPS, its first rows dropped: from an expert state it gives
the expert's own chunk back.
"""

from __future__ import annotations

import numpy as np
from dm_control.rl.control import PhysicsError

from . import scene_texts
from .expert import Waypoint, at_step, expert_episode, quat_mul, transfer_cube_plan
from .physics import AlohaPhysics
from .units import finger_to_normalized, normalized_to_finger

TRACKING_LAG_STEPS = 3
REGRASP_STEPS = 30  # a missed grasp: the right gripper above the cube again this many steps from now
PICK_ABOVE_STEP = 90  # the plan's step at which the right gripper is above the cube (expert.transfer_cube_plan)
CLOSE_DONE_STEP = 170  # ... and by which it has closed on it
CLOSED = 0.5  # a normalized gripper below this is closed (or closing)
ARMS = ("left", "right")


def _quat_conj(q: np.ndarray) -> np.ndarray:
    return np.array([q[0], -q[1], -q[2], -q[3]])


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The vector ``v`` rotated by the unit quaternion ``q`` (w, x, y, z)."""
    return quat_mul(quat_mul(q, np.array([0.0, *v])), _quat_conj(q))[1:]


class ReplanningExpert:
    def __init__(self, task_name: str = "transfer_cube") -> None:
        self.ee = AlohaPhysics(task_name, end_effector=True)
        # Each weld holds its gripper at a pose relative to its mocap body (eq_data: anchor, relative position,
        # relative quaternion, torque scale): gripper = mocap ⊕ (position, quaternion).
        weld = self.ee.physics.model.eq_data
        self._weld = [(weld[i, 3:6].copy(), weld[i, 6:10] / np.linalg.norm(weld[i, 6:10])) for i in range(len(ARMS))]
        self.ee.reset(0)
        self._start_mocap = self.ee.mocap_poses()
        self.begin(0)

    @staticmethod
    def _gripper_pose(physics: AlohaPhysics, arm: str) -> np.ndarray:
        data = physics.physics.named.data
        return np.concatenate([data.xpos[f"vx300s_{arm}/gripper_link"], data.xquat[f"vx300s_{arm}/gripper_link"]])

    def _mocap_for(self, gripper: np.ndarray, arm: int) -> tuple[np.ndarray, np.ndarray]:
        """The mocap pose whose weld holds the gripper at ``gripper`` (xyz + quaternion)."""
        offset, rotation = self._weld[arm]
        quat = quat_mul(gripper[3:], _quat_conj(rotation))
        return gripper[:3] - _rotate(quat, offset), quat

    def begin(self, seed: int) -> None:
        """A new episode, its cube placed by ``seed``: the plan's own run in the joint-space scene gives the
        states each step of the schedule looks like (``phase_step``)."""
        scene = AlohaPhysics(self.ee.task.name)
        scene.reset(seed)
        self._start_cube = scene.object_poses()[0].copy()
        self._cube = self._start_cube[:3].copy()  # where the pick goes: the cube on the table, last seen
        self._shift = 0  # steps the schedule runs late after missed grasps
        self._regrasp: Waypoint | None = None  # the right arm's pose when its last missed grasp was seen
        states = []
        for action in expert_episode(seed, self.ee.task.name).actions:
            states.append(scene.dataset_state())
            scene.set_arm_targets(np.concatenate([action[:6], action[7:13]]))
            scene.set_finger_targets(float(normalized_to_finger(action[6])), float(normalized_to_finger(action[13])))
            scene.step()
        scene.physics.free()
        self._nominal = np.asarray(states)

    def phase_step(self, scene: AlohaPhysics) -> int:
        """The step of the plan whose state is nearest to the scene's (14 dims: joints in rad, grippers
        normalized): where along the schedule the arms are, whatever the episode's clock says. The policy has
        no clock: a state it reaches late must get the label the expert's own state there got."""
        return int(np.argmin(np.linalg.norm(self._nominal - scene.dataset_state(), axis=1)))

    def chunk(self, scene: AlohaPhysics, step: int, horizon: int) -> np.ndarray | None:
        """[horizon, 14] dataset-space actions (joints rad, grippers 0 closed .. 1 open) for the joint-space
        ``scene`` as it is at episode ``step`` of the episode ``begin`` started (calls in step order). The
        schedule runs from ``phase_step``, where the state is along it; after a missed grasp from ``step``.
        None when the end-effector scene cannot follow from there (MuJoCo finds the copied state unstable,
        also at rest: a policy can wedge the fingers into the cube)."""
        if self._regrasp is None:  # after a missed grasp the schedule has moved on: the episode's clock
            step = self.phase_step(scene)
        for keep_velocities in (True, False):
            try:
                return self._rollout(scene, step, horizon, keep_velocities)
            except PhysicsError:
                continue
        return None

    def _rollout(self, scene: AlohaPhysics, step: int, horizon: int, keep_velocities: bool) -> np.ndarray:
        ee, data = self.ee, self.ee.physics.data
        with ee.physics.reset_context():
            data.qpos[:] = scene.physics.data.qpos
            data.qvel[:] = scene.physics.data.qvel if keep_velocities else 0.0
            for i, arm in enumerate(ARMS):
                data.mocap_pos[i], data.mocap_quat[i] = self._mocap_for(self._gripper_pose(scene, arm), i)
        fingers = finger_to_normalized(scene.finger_positions())
        plans = self._plans(scene, step, fingers)
        lag = min(step, TRACKING_LAG_STEPS)  # at the start the arms rest where the plan's first row is
        t0 = step - lag
        rows = np.zeros((horizon + lag, 14))
        grippers = np.array([at_step(p, t0 - 1)[1] for p in plans])  # what the plan commanded a step before
        for j in range(len(rows)):
            arms = ee.arm_positions()
            rows[j, :6], rows[j, 7:13] = arms[:6], arms[6:]
            rows[j, [6, 13]] = grippers
            (left, g_left), (right, g_right) = (at_step(p, t0 + j) for p in plans)
            ee.set_mocap(left, right)
            grippers = np.array([g_left, g_right])
            ee.set_finger_targets(float(normalized_to_finger(g_left)), float(normalized_to_finger(g_right)))
            ee.step()
        return rows[lag:]

    def _plans(self, scene: AlohaPhysics, step: int, fingers: np.ndarray) -> tuple[list[Waypoint], list[Waypoint]]:
        """Each arm's waypoints: the plan's own schedule (the welds pull the copied arms onto it), the pick where
        the cube stands while it is on the table (and where it was picked once it is not); after a missed grasp
        the schedule shifts for good, and the right arm goes from where it is, opening, to above the cube."""
        if scene_texts.holder(scene) is None:
            self._cube = scene_texts.cube_position(scene)
            if step >= CLOSE_DONE_STEP + self._shift and fingers[1] < CLOSED:  # closed, the cube still down
                self._shift = step + REGRASP_STEPS - PICK_ABOVE_STEP
                here = np.concatenate([self.ee.physics.data.mocap_pos[1], self.ee.physics.data.mocap_quat[1]])
                self._regrasp = Waypoint(step - min(step, TRACKING_LAG_STEPS), here[:3], here[3:], 1.0)
        left, right = transfer_cube_plan(*self._start_mocap, np.concatenate([self._cube, self._start_cube[3:]]))
        later = lambda plan: [Waypoint(w.step + self._shift if w.step else 0, w.xyz, w.quat, w.gripper) for w in plan]  # noqa: E731
        left, right = later(left), later(right)
        if self._regrasp is not None:
            right = [self._regrasp, *(w for w in right if w.step > self._regrasp.step)]
        return left, right
