"""The guard in physics: the MuJoCo ALOHA driven by a wild model through config/aloha_demo.yaml's chain and limits.

The committed ALOHA policy's runtime (models/aloha) with its published actions replaced by wild ones (steps
between random targets up to a fifth of a range beyond each joint's, NaN bursts, chunks far out of range)
drives held-out episodes in simulated time (`oxygen_ros.sim.evaluate`). What the arms' controllers are told
(their setpoint each 20 ms step) never moves a joint faster than the ViperX's pi rad/s nor past its range; the
physics' joint speeds are printed beside it (position actuators overshoot a setpoint that starts at full speed:
docs/safety.md). Without the limits the same model drives the joints at hundreds of rad/s until MuJoCo gives up.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aloha_available import require_aloha

require_aloha()

from dm_control.rl.control import PhysicsError  # noqa: E402

from oxygen_ros.runtime import PolicyRuntime  # noqa: E402
from oxygen_ros.runtime.safety import UNGUARDED  # noqa: E402
from oxygen_ros.sim.aloha.evaluation import eval_config, episode_specs, load_params  # noqa: E402
from oxygen_ros.sim.aloha.units import DT  # noqa: E402
from oxygen_ros.sim.evaluate import run_episode  # noqa: E402
from test_safety_dds import wild_actions  # noqa: E402

PARAMS = Path(__file__).resolve().parents[1] / "config" / "aloha_demo.yaml"
EPISODES, SEED = 2, 0  # held-out cube positions
AT_LIMIT_RAD = 0.02  # a joint this close to its range's end is "at its limit"
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def wild_runtime(config: Any, outputs: Any, limits: Any, seed: int) -> PolicyRuntime:
    runtime = PolicyRuntime.load(config)
    inner, rng, count = runtime._in_robot_units, np.random.default_rng(seed), [0]

    def injected(tick: Any, frame: Any, events: list) -> Any:
        result = inner(tick, frame, events)
        k = count[0] = count[0] + 1
        actions = wild_actions("far" if k % 7 == 0 else "wild", rng, outputs, limits, result.actions.shape)
        if k % 5 == 0:
            actions[rng.integers(len(actions)) :] = np.nan  # a NaN burst
        return dataclasses.replace(result, actions=actions.astype(np.float32))

    runtime._in_robot_units = injected
    return runtime


def run(overrides: dict[str, Any]) -> dict[str, Any]:
    """Episodes with the wild model; the arms' joint angles each 20 ms step and what the guard did."""
    guarded = load_params(PARAMS)  # the limits the wild actions are drawn around, whichever run
    params = load_params(PARAMS, overrides)
    runtime = wild_runtime(eval_config(params.config), guarded.wiring.outputs, guarded.wiring.limits, seed=1)
    episodes: list[Any] = []
    setpoints: list[list[np.ndarray]] = []

    def watch(episode: Any) -> None:  # each step: the arms' setpoints for its end, as the actuators get them
        episodes.append(episode)
        setpoints.append([])
        episode.on_step = lambda e: setpoints[-1].append(
            np.concatenate([f.setpoint(e.driver.step_count * DT) for f in e.driver._followers]))

    specs = episode_specs(params.wiring, SEED, EPISODES, on_start=watch)
    unstable = 0
    for spec in specs:
        try:
            run_episode(runtime, spec, params.settings)
        except PhysicsError:  # MuJoCo refuses to go on: the arm was driven beyond what the physics can integrate
            unstable += 1
    limits = guarded.wiring.limits
    lower = np.concatenate([limits[o].lower for o in ("left_arm", "right_arm")])
    upper = np.concatenate([limits[o].upper for o in ("left_arm", "right_arm")])
    speeds, at_limit, commanded, beyond = [], [], [], 0
    for e, sp in zip(episodes, setpoints):
        sp = np.asarray(sp)
        commanded.append((np.abs(np.diff(sp, axis=0)) / DT).max(axis=0))
        beyond += int(np.count_nonzero((sp < lower - 1e-9) | (sp > upper + 1e-9)))
        q = np.asarray(e.arm_log)
        v = np.abs(np.diff(q, axis=0)) / DT
        speeds.append(v.max(axis=0))
        near = (q[1:] <= lower + AT_LIMIT_RAD) | (q[1:] >= upper - AT_LIMIT_RAD)
        at_limit.append(float(v[near].max()) if near.any() else 0.0)
    hits = sum(sum(e.guard.hits.snapshot().values()) for e in episodes)
    return {"max_speed": np.max(speeds, axis=0), "commanded_speed": np.max(commanded, axis=0), "beyond_range": beyond, "speed_at_limit": max(at_limit), "holds": sum(len(e.holds) for e in episodes),
            "hits": hits, "steps": sum(len(e.arm_log) - 1 for e in episodes), "unstable": unstable}  # fmt: skip


def test_a_wild_model_on_the_mujoco_aloha_keeps_the_viperx_speed_and_its_joint_limits() -> None:
    vmax = math.pi
    with_limits = run({})
    without = run(UNGUARDED)
    print(f"\nMuJoCo ALOHA, wild model, {EPISODES} held-out episodes (seeds {SEED}-{SEED + EPISODES - 1}), "
          f"{with_limits['steps']} steps. With limits: setpoints at most {with_limits['commanded_speed'].max():.2f} rad/s "
          f"(limit {vmax:.2f}), {with_limits['beyond_range']} beyond a joint's range; the physics' joints at most "
          f"{with_limits['max_speed'].max():.2f} rad/s, at a joint limit at most {with_limits['speed_at_limit']:.2f} rad/s; "
          f"{with_limits['holds']} holds, {with_limits['hits']} limit hits. Without limits: setpoints "
          f"{without['commanded_speed'].max():.1f} rad/s, {without['beyond_range']} beyond a range; joints "
          f"{without['max_speed'].max():.1f} rad/s, at a joint limit {without['speed_at_limit']:.1f} rad/s; "
          f"{without['unstable']} of {EPISODES} episodes ended by MuJoCo's unstable-physics error")
    assert with_limits["holds"] >= EPISODES and with_limits["hits"] > 0 and with_limits["unstable"] == 0
    assert np.all(with_limits["commanded_speed"] <= vmax * (1 + 1e-6)), with_limits["commanded_speed"]
    assert with_limits["beyond_range"] == 0
    assert with_limits["max_speed"].max() < 0.1 * without["max_speed"].max() or without["unstable"]
    assert without["commanded_speed"].max() > 10 * vmax  # the same model unguarded: the checks above can fail
