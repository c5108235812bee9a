"""The MuJoCo ALOHA without ROS: the real driver's units, the scripted expert, the environment, the simulated
drivers' controllers and the model-space transform (gym-aloha's scenes, ACT's and openpi's constants)."""

from __future__ import annotations

import numpy as np
import pytest

from aloha_available import require_aloha  # noqa: E402

require_aloha()

from oxygen_ros.embodiment import make_adapter  # noqa: E402
from oxygen_ros.model.checkpoints.normalize import NormStats, Normalizer  # noqa: E402
from oxygen_ros.runtime.trajectory import TimedTrajectory  # noqa: E402
from oxygen_ros.sim.aloha import units  # noqa: E402
from oxygen_ros.sim.aloha.driver import AlohaDriver, joint_names  # noqa: E402
from oxygen_ros.sim.aloha.env import AlohaEnv  # noqa: E402
from oxygen_ros.sim.aloha.expert import EPISODE_STEPS, expert_episode, replay  # noqa: E402
from oxygen_ros.sim.aloha.model_space import model_outputs  # noqa: E402
from oxygen_ros.sim.aloha.physics import AlohaPhysics  # noqa: E402

NS = 1_000_000_000


def test_gripper_units_are_acts_constants() -> None:
    """openpi aloha_real constants.py: PUPPET_GRIPPER_JOINT_UNNORMALIZE_FN(0) = -0.6213, (1) = 1.4910; the finger
    position normalizes over 0.01844 … 0.058; joint ↔ finger go through the normalized value (PUPPET_JOINT2POS)."""
    assert units.normalized_to_gripper_joint(0.0) == pytest.approx(-0.6213)
    assert units.normalized_to_gripper_joint(1.0) == pytest.approx(1.4910)
    assert units.finger_to_normalized(0.058) == pytest.approx(1.0)
    assert units.finger_to_normalized(0.01844) == pytest.approx(0.0)
    x = np.linspace(-0.7, 1.6, 11)
    np.testing.assert_allclose(units.finger_to_gripper_joint(units.gripper_joint_to_finger(x)), x, atol=1e-12)
    assert units.gripper_joint_to_finger(1.4910) == pytest.approx(0.058)


def test_expert_transfers_the_cube_in_the_joint_space_scene() -> None:
    """ACT's waypoints in the end-effector scene, recorded and replayed in the joint-space scene: reward 4."""
    for seed in (0, 7):
        plan = expert_episode(seed)
        assert plan.actions.shape == (EPISODE_STEPS, 14) and plan.ee_reward == 4
        assert np.all((plan.actions[:, [6, 13]] >= 0) & (plan.actions[:, [6, 13]] <= 1))
        step = replay(plan.actions, seed)
        assert step is not None and 150 < step < 300


def test_holding_still_never_succeeds_and_a_wrong_plan_fails() -> None:
    """The reward is earned: the start pose held does nothing, and seed 3's plan misses seed 4's cube."""
    assert replay(np.tile(expert_episode(0).actions[:1], (250, 1)), 0) is None
    poses = [AlohaPhysics().task.object_poses(s)[0][:2] for s in (3, 4)]
    assert np.linalg.norm(poses[0] - poses[1]) > 0.03
    assert replay(expert_episode(3).actions, 4) is None


def test_env_state_images_and_bad_actions() -> None:
    env = AlohaEnv(fast_render=True)
    state = env.reset(5)
    np.testing.assert_allclose(state[:6], units.START_ARM, atol=1e-6)
    assert state[6] == pytest.approx(units.finger_to_normalized(units.START_FINGER_M), abs=1e-3)
    images = env.images(224, 224)
    assert set(images) == {"cam_high", "cam_left_wrist", "cam_right_wrist"}
    assert all(img.shape == (224, 224, 3) and img.dtype == np.uint8 and img.std() > 5 for img in images.values())
    assert not np.array_equal(images["cam_high"], images["cam_left_wrist"])
    with pytest.raises(ValueError, match="14 finite values"):
        env.step(np.full(14, np.nan))
    with pytest.raises(ValueError, match="unknown camera"):
        env.images(cameras=("cam_low",))


def test_driver_reports_and_takes_the_real_drivers_units() -> None:
    """Joint state: per arm six joints and the gripper joint in rad, the fingers in m (the right one mirrored); a
    gripper command in rad moves the finger where PUPPET_JOINT2POS puts it; the arm follows a JointTrajectory."""
    d = AlohaDriver([2], episode_steps=100)
    d.start_next()
    assert d.names == joint_names() and d.names[6:9] == ["left_gripper", "left_left_finger", "left_right_finger"]
    left = d.arm_joint_names[0]
    target = np.array([0.3, -0.6, 0.9, 0.1, -0.2, 0.2])
    stamp = d.time_ns
    times = np.arange(1, 31) * units.DT
    path = np.array(units.START_ARM) + (target - np.array(units.START_ARM)) * np.minimum(1, times / 0.4)[:, None]
    d.command_arm(0, TimedTrajectory(left, times, path, start_time_ns=stamp))
    d.command_gripper(0, [units.GRIPPER_JOINT_OPEN_RAD])
    d.command_gripper(1, [units.GRIPPER_JOINT_CLOSED_RAD])
    for _ in range(60):
        d.step()
    q = d.joint_positions()
    np.testing.assert_allclose(q[:6], target, atol=0.05)
    assert q[7] == pytest.approx(0.057, abs=0.002) and q[8] == pytest.approx(-q[7])  # open: the finger's range end
    assert q[6] == pytest.approx(units.finger_to_gripper_joint(q[7]))
    assert q[16] == pytest.approx(0.021, abs=0.002)  # the right gripper closed (its actuator's lower limit)
    np.testing.assert_allclose(q[9:15], units.START_ARM, atol=0.05)  # the right arm held its start pose
    with pytest.raises(ValueError, match="one finite value"):
        d.command_gripper(0, [0.1, 0.2])


def test_driver_ends_episodes_on_the_policy_grid() -> None:
    """Each episode starts on a multiple of the policy's period (never at 0) and ends at its step limit."""
    d = AlohaDriver([0, 1], episode_steps=7)
    first = d.start_next(grid_steps=5)
    assert first.start_step == 5
    ended = [d.step() for _ in range(7)]
    assert ended[-1] is first and all(e is None for e in ended[:-1]) and not first.success
    second = d.start_next(grid_steps=5)
    assert second.start_step == 15 and d.start_next(5) is None


def test_model_outputs_invert_openpis_output_transforms() -> None:
    """Dataset-space actions through model_outputs and then the node's path (unnormalize, add the state on the
    delta dims, AlohaOutputs) come back unchanged."""
    rng = np.random.default_rng(1)
    actions = np.concatenate([rng.uniform(-1, 1, (8, 6)), rng.uniform(0, 1, (8, 1))] * 2, axis=1)
    state = np.concatenate([rng.uniform(-1, 1, 6), [0.4], rng.uniform(-1, 1, 6), [0.7]])
    stats = {k: NormStats(mean=np.zeros(14), std=np.ones(14), q01=np.full(14, -2.0), q99=np.full(14, 2.0)) for k in ("state", "actions")}
    norm = Normalizer(stats, mode="quantile")
    mask = [True] * 6 + [False] + [True] * 6 + [False]
    out = model_outputs(actions, state, norm, mask, 32)
    assert out.shape == (8, 32) and np.all(out[:, 14:] == 0)
    adapter = make_adapter("aloha")
    back = norm.unnormalize_actions(out)[:, :14]
    back[:, np.array(mask)] += adapter.state_in(state)[np.array(mask)]
    np.testing.assert_allclose(adapter.actions_out(back), actions, atol=1e-5)
    np.testing.assert_allclose(adapter.actions_out(adapter.actions_in(actions)), actions, atol=1e-12)


def test_expert_command_prints_its_success_as_the_last_json_line(capsys) -> None:
    from oxygen_ros.sim.cli import main

    assert main(["expert", "--env", "aloha_transfer_cube", "--episodes", "2", "--seed", "11", "--quiet"]) == 0
    import json

    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["success_rate"] == 1.0 and summary["episodes"] == 2 and 200 < summary["mean_success_step"] < 260
    assert main(["expert", "--env", "aloha_insertion", "--episodes", "1"]) == 2
    assert "no scripted expert for aloha_insertion" in capsys.readouterr().err
