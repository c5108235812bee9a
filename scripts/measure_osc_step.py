"""Measure robosuite's OSC_POSE on its Panda in MuJoCo: how far the grip site moves per control step for a
constant unit delta action, in translation and in rotation.

LIBERO runs robosuite's Panda with the default OSC_POSE config (kp 150, critical damping, output_max 0.05 m /
0.5 rad, no interpolation) at control_freq 20: each env step sets the goal one scaled delta ahead of the *current*
grip-site pose and lets the controller chase it for 1/20 s. This prints the motion per step (the first step and
the steady mean over the later ones) and its fraction of the nominal 0.05 m / 0.5 rad, as JSON, so
config/robots/libero.yaml's Servo scales and test/fixtures/robosuite_osc_step.json can be checked against it.

robosuite is not a dependency of the package: run this in the environment of its own that
scripts/extra_envs.py makes on request (robosuite==1.4.1, mujoco==3.8.1, under ~/.cache/oxygen_ros/):

    .venv/bin/python scripts/extra_envs.py make robosuite-osc
    "$(.venv/bin/python scripts/extra_envs.py path robosuite-osc)"/bin/python scripts/measure_osc_step.py \
        > test/fixtures/robosuite_osc_step.json

(LIBERO pins robosuite 1.4; its OSC code is the same in 1.4.1.)
"""

from __future__ import annotations

import json
import sys

import numpy as np

CONTROL_FREQ = 20
STEPS = 8  # per direction; short enough that the arm stays clear of the table and its joint limits
SETTLE = 3  # steps before the steady mean (the arm starts at rest)


def _quat_xyzw_to_matrix(q: np.ndarray) -> np.ndarray:
    x, y, z, w = q / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


def _rotation_vector(r: np.ndarray) -> np.ndarray:
    """The axis-angle vector of a rotation matrix (angles below pi)."""
    angle = np.arccos(np.clip((np.trace(r) - 1) / 2, -1.0, 1.0))
    if angle < 1e-12:
        return np.zeros(3)
    axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]]) / (2 * np.sin(angle))
    return axis * angle


def _make_env():  # noqa: ANN202
    import robosuite as suite
    from robosuite import load_controller_config

    controller = load_controller_config(default_controller="OSC_POSE")
    env = suite.make("Lift", robots="Panda", controller_configs=controller, has_renderer=False,
                     has_offscreen_renderer=False, use_camera_obs=False, control_freq=CONTROL_FREQ,
                     ignore_done=True, horizon=10_000)  # fmt: skip
    return env, controller


def _pose(obs: dict) -> tuple[np.ndarray, np.ndarray]:
    return np.array(obs["robot0_eef_pos"]), _quat_xyzw_to_matrix(np.array(obs["robot0_eef_quat"]))


def _hand(env) -> np.ndarray:  # noqa: ANN001
    """The Panda hand's body origin (the flange side of the grip site), world frame."""
    body = env.sim.model.body_name2id(env.robots[0].robot_model.eef_name)
    return np.array(env.sim.data.body_xpos[body])


def _run(env, dim: int, magnitude: float) -> dict[str, object]:  # noqa: ANN001
    obs = env.reset()
    action = np.zeros(7)
    action[dim] = magnitude
    action[6] = -1.0  # gripper open
    moved, rotated, grip_shift = [], [], []
    for _ in range(STEPS):
        pos, rot = _pose(obs)
        obs, *_ = env.step(action)
        new_pos, new_rot = _pose(obs)
        moved.append(float(np.dot(new_pos - pos, np.eye(3)[dim % 3])) if dim < 3 else float(np.linalg.norm(new_pos - pos)))
        turn = _rotation_vector(new_rot @ rot.T)  # world-frame rotation of this step
        rotated.append(float(turn[dim - 3]) if dim >= 3 else float(np.linalg.norm(turn)))
        grip_shift.append(float(np.linalg.norm(new_pos - pos)))
    along = moved if dim < 3 else rotated
    steady = float(np.mean(along[SETTLE:]))
    return {"dim": dim, "magnitude": magnitude, "per_step": along, "first_step": along[0], "steady_per_step": steady,
            "grip_site_shift_per_step": grip_shift if dim >= 3 else None}  # fmt: skip


def main() -> int:
    env, controller = _make_env()
    import robosuite

    # The grip site's offset from the hand body at rest (robosuite's Panda: 0.097 + 0.008 m along the hand's z).
    obs = env.reset()
    offset = float(np.linalg.norm(_pose(obs)[0] - _hand(env)))
    runs = [_run(env, dim, sign * m) for dim in range(6) for sign in (1.0, -1.0) for m in (1.0, 0.5)]
    nominal = np.array(controller["output_max"], dtype=float)
    summary = {}
    for kind, dims in (("translation", range(3)), ("rotation", range(3, 6))):
        unit = [abs(r["steady_per_step"]) for r in runs if r["dim"] in dims and abs(r["magnitude"]) == 1.0]
        half = [abs(r["steady_per_step"]) for r in runs if r["dim"] in dims and abs(r["magnitude"]) == 0.5]
        first = [abs(r["first_step"]) for r in runs if r["dim"] in dims and abs(r["magnitude"]) == 1.0]
        scale = float(nominal[dims[0]])
        summary[kind] = {
            "nominal_per_step": scale,
            "unit_steady_per_step_mean": float(np.mean(unit)), "unit_steady_per_step_min": float(np.min(unit)),
            "unit_steady_per_step_max": float(np.max(unit)), "unit_first_step_mean": float(np.mean(first)),
            "half_steady_per_step_mean": float(np.mean(half)),
            "fraction_of_nominal": float(np.mean(unit)) / scale,
            "speed_per_unit": float(np.mean(unit)) * CONTROL_FREQ,  # m/s or rad/s for |delta| = 1
        }  # fmt: skip
    rotation_shift = [max(r["grip_site_shift_per_step"]) for r in runs if r["dim"] >= 3 and abs(r["magnitude"]) == 1.0]
    result = {
        "source": f"robosuite {robosuite.__version__}, Lift, Panda, OSC_POSE default config, control_freq {CONTROL_FREQ}",
        "controller": {k: controller[k] for k in ("kp", "damping_ratio", "output_max", "interpolation")},
        "steps_per_direction": STEPS, "settle_steps": SETTLE, "grip_site_offset_from_hand_m": offset,
        "summary": summary, "max_grip_site_shift_while_rotating_m": float(max(rotation_shift)), "runs": runs,
    }  # fmt: skip
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
