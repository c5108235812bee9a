"""The scripted expert, from ACT's published transfer-cube waypoints (Zhao et al. 2023,
``scripted_policy.py``): gripper poses at fixed steps, linearly interpolated, executed in the end-effector
(mocap) scene; the joints it records are the expert's actions in the joint-space scene, as ACT's
``record_sim_episodes`` makes its demonstrations.

An expert action is 14 values in ALOHA's dataset space: per arm six joint targets (rad) and the gripper
normalized (0 closed, 1 open), left arm first. ``expert_episode`` plans one seed; ``replay`` runs actions in
the joint-space scene and says when reward 4 (success) came.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .env import AlohaEnv
from .physics import SUCCESS_REWARD, AlohaPhysics
from .units import finger_to_normalized, normalized_to_finger

EPISODE_STEPS = 400  # ACT's episode_len of the scripted transfer-cube task
# Insertion: ACT's waypoints solve it in the end-effector scene here, but their recorded joints replayed in the
# joint-space scene never insert (0/4 seeds, best reward 2): no expert for it.
EXPERT_TASKS = ("transfer_cube",)


@dataclass(frozen=True)
class Waypoint:
    step: int
    xyz: np.ndarray
    quat: np.ndarray  # w, x, y, z
    gripper: float  # 0 closed, 1 open


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])  # fmt: skip


def _axis_angle(axis: tuple[float, float, float], degrees: float) -> np.ndarray:
    half = math.radians(degrees) / 2
    return np.array([math.cos(half), *(math.sin(half) * np.asarray(axis, dtype=np.float64))])


def _plan(rows: list[tuple[int, np.ndarray, np.ndarray, float]]) -> list[Waypoint]:
    return [Waypoint(step, np.asarray(xyz, np.float64), np.asarray(quat, np.float64), float(g)) for step, xyz, quat, g in rows]


def transfer_cube_plan(start_left: np.ndarray, start_right: np.ndarray, cube: np.ndarray) -> tuple[list[Waypoint], list[Waypoint]]:
    """ACT's PickAndTransferPolicy: the right arm picks the cube and meets the left arm, which takes it."""
    box = cube[:3]
    pick = quat_mul(start_right[3:], _axis_angle((0, 1, 0), -60))  # the right gripper tilted to pick
    meet_left = _axis_angle((1, 0, 0), 90)
    meet = np.array([0.0, 0.5, 0.25])
    upright = np.array([1.0, 0.0, 0.0, 0.0])
    left = _plan([
        (0, start_left[:3], start_left[3:], 0),             # wait
        (100, meet + [-0.1, 0, -0.02], meet_left, 1),       # approach the meeting point, open
        (260, meet + [0.02, 0, -0.02], meet_left, 1),       # move in
        (310, meet + [0.02, 0, -0.02], meet_left, 0),       # close on the cube
        (360, meet + [-0.1, 0, -0.02], upright, 0),         # pull it to the left
        (400, meet + [-0.1, 0, -0.02], upright, 0),         # stay
    ])  # fmt: skip
    right = _plan([
        (0, start_right[:3], start_right[3:], 0),           # wait
        (90, box + [0, 0, 0.08], pick, 1),                  # above the cube, open
        (130, box + [0, 0, -0.015], pick, 1),               # down
        (170, box + [0, 0, -0.015], pick, 0),               # close
        (200, meet + [0.05, 0, 0], pick, 0),                # towards the meeting point
        (220, meet, pick, 0),                               # at it
        (310, meet, pick, 1),                               # let go
        (360, meet + [0.1, 0, 0], pick, 1),                 # back off to the right
        (400, meet + [0.1, 0, 0], pick, 1),                 # stay
    ])  # fmt: skip
    return left, right


def at_step(plan: list[Waypoint], step: int) -> tuple[np.ndarray, float]:
    """The pose (xyz + quaternion) and gripper of a plan at ``step``: linear between waypoints, held after."""
    if step >= plan[-1].step:
        w = plan[-1]
        return np.concatenate([w.xyz, w.quat]), w.gripper
    nxt = next(i for i, w in enumerate(plan) if w.step > step)
    a, b = plan[nxt - 1], plan[nxt]
    f = (step - a.step) / (b.step - a.step)
    return np.concatenate([a.xyz + (b.xyz - a.xyz) * f, a.quat + (b.quat - a.quat) * f]), a.gripper + (b.gripper - a.gripper) * f


@dataclass(frozen=True)
class ExpertEpisode:
    task: str
    seed: int
    actions: np.ndarray  # [steps, 14] in ALOHA's dataset space (joints rad, grippers 0 closed … 1 open)
    ee_reward: int  # the best reward of the end-effector rollout itself

    @property
    def steps(self) -> int:
        return len(self.actions)


def expert_episode(seed: int, task_name: str = "transfer_cube") -> ExpertEpisode:
    """Run the waypoints for ``seed`` in the end-effector scene and record the joint-space actions: action k is
    the arms' joints after k steps and the gripper target of that step (ACT's record_sim_episodes)."""
    if task_name not in EXPERT_TASKS:
        raise ValueError(f"no scripted expert for {task_name!r}; there is one for {list(EXPERT_TASKS)}")
    sim = AlohaPhysics(task_name, end_effector=True)
    sim.reset(seed)
    start_left, start_right = sim.mocap_poses()
    left_plan, right_plan = transfer_cube_plan(start_left, start_right, sim.object_poses()[0])
    steps = EPISODE_STEPS
    actions = np.zeros((steps, 14))
    best = 0
    grippers = np.array([0.0, 0.0])
    for k in range(steps):
        arms = sim.arm_positions()
        actions[k, :6], actions[k, 7:13] = arms[:6], arms[6:]
        actions[k, [6, 13]] = finger_to_normalized(sim.physics.data.ctrl[[0, 2]]) if k else grippers
        (left_pose, g_left), (right_pose, g_right) = at_step(left_plan, k), at_step(right_plan, k)
        sim.set_mocap(left_pose, right_pose)
        sim.set_finger_targets(float(normalized_to_finger(g_left)), float(normalized_to_finger(g_right)))
        sim.step()
        best = max(best, sim.reward())
    actions[0, [6, 13]] = actions[1, [6, 13]]
    return ExpertEpisode(task_name, seed, actions, best)


def replay(actions: np.ndarray, seed: int, task_name: str = "transfer_cube",
           on_step: Callable[[int, AlohaEnv], None] | None = None) -> int | None:  # fmt: skip
    """Run 14-dim dataset-space actions (one a step) in the joint-space scene from ``seed``; the number of steps
    after which reward 4 came first, or None. ``on_step(k, env)`` sees the scene after each step."""
    env = AlohaEnv(task_name)
    env.reset(seed)
    for k, a in enumerate(np.asarray(actions, dtype=np.float64)):
        reward = env.step(a)
        if on_step is not None:
            on_step(k, env)
        if reward >= SUCCESS_REWARD:
            return k + 1
    return None
