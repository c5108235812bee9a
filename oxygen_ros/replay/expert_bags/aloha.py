"""The MuJoCo ALOHA driven by its scripted expert, written as the bag a team has after teleoperating.

The simulated driver stack (``oxygen_ros.sim.aloha.driver.AlohaDriver``, what the simulator node runs) executes
the expert's actions (``oxygen_ros.sim.aloha.expert.expert_episode``) as a teleoperator's commands reach the real robot: at every 20 ms step
each arm gets a ``trajectory_msgs/JointTrajectory`` of one point (its six joint targets in rad, for the end
of the step) and each gripper a ``std_msgs/Float64MultiArray`` (the gripper joint's radians), while the
joint states (the Interbotix driver's units: joints in rad, fingers in m) and the three cameras (every
``camera_every_steps`` steps) are recorded before the step. Topics are the real ALOHA's and the simulator
node's: ``/cam_high/image_raw``, ``/cam_left_wrist/image_raw``, ``/cam_right_wrist/image_raw``,
``/joint_states``, ``/{left,right}_arm_controller/joint_trajectory``, ``/{left,right}_gripper_controller/commands``,
the instruction (latched) and the episodes' starts and ends as JSON on ``/oxygen_sim_node/episode``.
Episodes follow one another on one clock, as the simulator node runs them. No rclpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_ros.runtime.trajectory import TimedTrajectory
from oxygen_ros.sim.aloha.dataset import CAMERAS, INSTRUCTION
from oxygen_ros.sim.aloha.driver import AlohaDriver
from oxygen_ros.sim.aloha.env import camera_images
from oxygen_ros.sim.aloha.expert import EPISODE_STEPS, expert_episode
from oxygen_ros.sim.aloha.units import DT, normalized_to_gripper_joint

from ..robot_bag import RobotBagWriter

ARMS = ("left", "right")
EPISODE_TOPIC = "/oxygen_sim_node/episode"  # the simulator node's ~/episode


@dataclass(frozen=True)
class AlohaBagSpec:
    seeds: Sequence[int]
    task: str = "transfer_cube"
    image_size: tuple[int, int] = (96, 96)  # width, height: the policy's view (config/aloha_demo.yaml)
    camera_every_steps: int = 1  # 50 Hz cameras, as ALOHA records
    fast_render: bool = True  # the training data's look
    image_format: str = "raw"
    instruction: str = INSTRUCTION
    instruction_topic: str = "/oxygen_node/instruction"  # where oxygen_node listens by default
    joint_state_topic: str = "/joint_states"
    episode_steps: int = EPISODE_STEPS
    whole_episodes: bool = False  # run every episode its episode_steps, on past the hand-over (a whole recording)


def camera_topic(name: str) -> str:
    return f"/{name}/image_raw"


def record_expert_bag(path: str | Path, spec: AlohaBagSpec, *, storage: str | None = None, overwrite: bool = False,
                      on_step: Callable[[int, int], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Write the expert's episodes of ``spec`` to ``path``; returns a summary (topics, episodes, success).
    ``on_step(done, total)`` is called after every step."""
    driver = AlohaDriver(list(spec.seeds), spec.task, spec.episode_steps, fast_render=spec.fast_render,
                         steps_after_success=spec.episode_steps if spec.whole_episodes else 0)
    width, height = spec.image_size
    total = len(spec.seeds) * spec.episode_steps
    episodes: list[dict[str, Any]] = []
    done = 0
    with RobotBagWriter(path, image_format=spec.image_format, storage=storage, overwrite=overwrite) as bag:
        while (record := driver.start_next()) is not None:
            plan = expert_episode(record.seed, spec.task).actions
            start = driver.time_ns
            if not episodes:
                bag.string(spec.instruction_topic, spec.instruction, start, latched=True)
            bag.event(EPISODE_TOPIC, start, **record.as_dict("start"))
            k = 0
            while driver.episode is not None:
                now = driver.time_ns
                bag.joint_state(spec.joint_state_topic, driver.names, driver.joint_positions(), now)
                if k % spec.camera_every_steps == 0:
                    for name, rgb in camera_images(driver.physics, height, width, CAMERAS).items():
                        bag.image(camera_topic(name), rgb, now, frame_id=name)
                _command(bag, driver, plan[min(k, len(plan) - 1)], now)
                driver.step()
                k += 1
                done += 1
                if on_step is not None:
                    on_step(done, total)
            bag.event(EPISODE_TOPIC, driver.time_ns, **record.as_dict("end"))
            episodes.append({"seed": record.seed, "success": record.success, "steps": record.steps})
            done = len(episodes) * spec.episode_steps
    ok = sum(e["success"] for e in episodes)
    return {**bag.summary(), "episodes": episodes, "success_rate": ok / len(episodes)}


def _command(bag: RobotBagWriter, driver: AlohaDriver, action: np.ndarray, now_ns: int) -> None:
    """The expert's action for the end of this step, sent as the controllers take it and recorded."""
    for arm, side in enumerate(ARMS):
        joints = driver.arm_joint_names[arm]
        targets = action[7 * arm : 7 * arm + 6]
        driver.command_arm(arm, TimedTrajectory(joints, np.array([DT]), targets[None, :]))
        bag.trajectory(f"/{side}_arm_controller/joint_trajectory", joints, targets[None, :], [DT], now_ns, stamp_ns=now_ns)
        gripper = [float(normalized_to_gripper_joint(action[7 * arm + 6]))]
        driver.command_gripper(arm, gripper)
        bag.float64_array(f"/{side}_gripper_controller/commands", gripper, now_ns)
