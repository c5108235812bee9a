"""``AlohaEnv``: the joint-space ALOHA scene in ALOHA's dataset space, for Python callers (evaluation, data).

Actions and the state are 14 values, left arm first: six joints (rad) and the gripper normalized (0 closed,
1 open), as ACT's and gym-aloha's datasets and openpi's ``aloha_real`` client use them. ``step`` applies one
action for one control step (DT) and returns the reward (4 = success); images are rendered only when
``images`` is called, at the size asked for.
"""

from __future__ import annotations

import numpy as np

from .physics import CAMERAS, SUCCESS_REWARD, AlohaPhysics, PhysicsError, SceneUnstable, physics_failure
from .units import DT, normalized_to_finger

# openpi's ALOHA image keys → the scene's cameras (cam_high is the top camera, as openpi's aloha_sim uses it).
CAMERA_OF = {"cam_high": "top", "cam_left_wrist": "left_wrist", "cam_right_wrist": "right_wrist"}


class AlohaEnv:
    def __init__(self, task_name: str = "transfer_cube", fast_render: bool = False) -> None:
        self.physics = AlohaPhysics(task_name, fast_render=fast_render)
        self.seed: int | None = None
        self.best_reward = 0

    @property
    def dt(self) -> float:
        return DT

    @property
    def steps(self) -> int:
        return self.physics.steps

    def reset(self, seed: int) -> np.ndarray:
        """A new episode (objects drawn by ``seed``); returns the state."""
        self.physics.reset(seed)
        self.seed = seed
        self.best_reward = 0
        return self.state()

    def state(self) -> np.ndarray:
        """14 values: per arm six joints (rad) and the gripper's finger position normalized (gym's agent_pos)."""
        return self.physics.dataset_state()

    def step(self, action: np.ndarray) -> int:
        """Apply one 14-value action for one step; returns the reward after it. Raises `SceneUnstable` (the
        step, the joint) when MuJoCo finds the state unstable."""
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (14,) or not np.all(np.isfinite(a)):
            raise ValueError(f"an ALOHA action is 14 finite values, got shape {a.shape}")
        self.physics.set_arm_targets(np.concatenate([a[:6], a[7:13]]))
        self.physics.set_finger_targets(float(normalized_to_finger(a[6])), float(normalized_to_finger(a[13])))
        try:
            self.physics.step()
        except PhysicsError as exc:  # MuJoCo reset the data itself; the next reset starts a new episode
            raise SceneUnstable(physics_failure(self.physics, self.physics.steps + 1, exc)) from exc
        reward = self.physics.reward()
        self.best_reward = max(self.best_reward, reward)
        return reward

    @property
    def success(self) -> bool:
        return self.best_reward >= SUCCESS_REWARD

    def images(self, height: int = 224, width: int = 224, cameras: tuple[str, ...] = tuple(CAMERA_OF)) -> dict[str, np.ndarray]:
        """The named cameras' images now (openpi names or the scene's own: ``top``, ``left_wrist``, ...)."""
        return camera_images(self.physics, height, width, cameras)


def camera_images(physics: AlohaPhysics, height: int, width: int, cameras: tuple[str, ...] = tuple(CAMERA_OF)) -> dict[str, np.ndarray]:
    """The named cameras' images of a scene now (openpi names or the scene's own)."""
    out = {}
    for name in cameras:
        camera = CAMERA_OF.get(name, name)
        if camera not in CAMERAS:
            raise ValueError(f"unknown camera {name!r}; choose from {list(CAMERA_OF)} or {list(CAMERAS)}")
        out[name] = physics.render(camera, height, width)
    return out
