"""Measure how far robosuite's OSC_POSE moves the Panda's grip site per control step for constant delta actions
of magnitudes 0.1 … 1, one axis at a time and in combination: the fixture config/robots/libero.yaml's twist
gains are made from and checked against (test/fixtures/robosuite_osc_gain.json; the config's curves: the single-axis
cases at ``MAGNITUDES``; the ``HOLDOUT`` magnitudes and the combinations only check them).

LIBERO runs robosuite's Panda with the default OSC_POSE config (kp 150, critical damping, output_max 0.05 m /
0.5 rad, no interpolation) at control_freq 20. Each case starts from the reset pose and holds one action for
``STEPS`` steps; the speed is the mean motion per step over the steps after ``SETTLE`` (the arm starts at rest),
times 20: the grip site's world-frame velocity (m/s) and its rotation vector per second (rad/s).

robosuite is not a dependency of the package: run this in the environment of its own that
scripts/extra_envs.py makes on request (robosuite==1.4.1, mujoco==3.2.3, under ~/.cache/oxygen_ros/):

    .venv/bin/python scripts/extra_envs.py make robosuite-osc
    MUJOCO_GL=egl "$(.venv/bin/python scripts/extra_envs.py path robosuite-osc)"/bin/python \
        scripts/measure_osc_gain.py > test/fixtures/robosuite_osc_gain.json

(LIBERO pins robosuite 1.4; its OSC code is the same in 1.4.1.)
"""

from __future__ import annotations

import json
import sys

import numpy as np

CONTROL_FREQ = 20
STEPS = 8  # short enough that the arm stays clear of the table and its joint limits
SETTLE = 3
MAGNITUDES = (0.1, 0.25, 0.5, 0.75, 1.0)  # the gain table's breakpoints
HOLDOUT = (0.15, 0.35, 0.6, 0.9)  # single-axis magnitudes between them, to check the table on (not fitted)
COMBINATIONS = (
    (1, 1, 1, 0, 0, 0), (0.5, 0.5, 0.5, 0, 0, 0), (0.25, -0.25, 0.25, 0, 0, 0), (1, 0.5, 0, 0, 0, 0),
    (0.1, 0.1, -0.1, 0, 0, 0), (0, 0, 0, 0.5, 0.5, 0), (0, 0, 0, 0.25, 0.25, 0.25), (0, 0, 0, 1, 1, 0),
    (0, 0, 0, 0.1, -0.1, 0.1), (0, 0, 0, 1, 0.25, 0), (0.5, 0, 0, 0, 0, 0.5), (0, 0.5, 0.5, 0.5, 0, 0),
    (-1, -1, -1, 0, 0, 0), (0.6, -0.6, 0.3, 0, 0, 0), (0, 0, 0, -0.5, 0.5, -0.5), (0, 0, 0, 0.6, 0, 0.6),
    (0, 0, 0, -1, -1, -1), (0.3, 0.3, 0, 0, 0.3, 0.3), (-0.5, 0.2, 0.4, -0.2, 0.4, 0.1), (0, 0, 0, 0.35, -0.6, 0),
)  # fmt: skip


def _quat_xyzw_to_matrix(q: np.ndarray) -> np.ndarray:
    x, y, z, w = q / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


def _rotation_vector(r: np.ndarray) -> np.ndarray:
    angle = np.arccos(np.clip((np.trace(r) - 1) / 2, -1.0, 1.0))
    if angle < 1e-12:
        return np.zeros(3)
    axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]]) / (2 * np.sin(angle))
    return axis * angle


def _pose(obs: dict) -> tuple[np.ndarray, np.ndarray]:
    return np.array(obs["robot0_eef_pos"]), _quat_xyzw_to_matrix(np.array(obs["robot0_eef_quat"]))


def _run(env, delta: np.ndarray) -> dict[str, object]:  # noqa: ANN001
    obs = env.reset()
    action = np.concatenate([delta, [-1.0]])  # gripper open
    linear, angular = [], []
    for _ in range(STEPS):
        pos, rot = _pose(obs)
        obs, *_ = env.step(action)
        new_pos, new_rot = _pose(obs)
        linear.append(new_pos - pos)
        angular.append(_rotation_vector(new_rot @ rot.T))  # world frame
    v = np.mean(linear[SETTLE:], axis=0) * CONTROL_FREQ
    w = np.mean(angular[SETTLE:], axis=0) * CONTROL_FREQ
    return {"action": [float(x) for x in delta], "linear_m_s": v.tolist(), "angular_rad_s": w.tolist()}


def main() -> int:
    import mujoco
    import robosuite as suite
    from robosuite import load_controller_config

    controller = load_controller_config(default_controller="OSC_POSE")
    env = suite.make("Lift", robots="Panda", controller_configs=controller, has_renderer=False,
                     has_offscreen_renderer=False, use_camera_obs=False, control_freq=CONTROL_FREQ,
                     ignore_done=True, horizon=10_000)  # fmt: skip
    cases = []
    for dim in range(6):
        for m in (*MAGNITUDES, *HOLDOUT):
            for sign in (1.0, -1.0):
                delta = np.zeros(6)
                delta[dim] = sign * m
                cases.append(_run(env, delta))
    cases += [_run(env, np.array(c, dtype=float)) for c in COMBINATIONS]
    result = {
        "source": f"robosuite {suite.__version__}, mujoco {mujoco.__version__}, Lift, Panda, OSC_POSE default config, "
                  f"control_freq {CONTROL_FREQ}; each case from env.reset() (its default joint noise)",
        "controller": {k: controller[k] for k in ("kp", "damping_ratio", "output_max", "interpolation")},
        "steps": STEPS, "settle_steps": SETTLE, "breakpoints": MAGNITUDES, "holdout": HOLDOUT, "cases": cases,
    }  # fmt: skip
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
