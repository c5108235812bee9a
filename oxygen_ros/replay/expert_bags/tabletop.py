"""The table-top arm driven by its scripted expert, written as the bag a team has after teleoperating it.

At every control period (0.2 s, config/demo_policy.yaml's 5 Hz) the expert's next joint command (its own
rollout from the true state, ``oxygen_ros.sim.expert.expert_chunk``) goes to the episode's joint trajectory follower as a
``trajectory_msgs/JointTrajectory`` of one point, one period ahead, and is recorded; the joint state (rad,
the gripper's opening in m) and both cameras are recorded before it. Topics are the simulator node's:
``/camera/base/image_raw``, ``/camera/wrist/image_raw``, ``/joint_states``,
``/joint_trajectory_controller/joint_trajectory``, the instruction on ``/instruction`` (latched) and the
episodes' starts and ends as JSON on ``/oxygen_sim_node/episode``. Episodes follow one another on one clock.
No rclpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_ros.runtime.trajectory import TimedTrajectory
from oxygen_ros.sim.episode import DEFAULT_TIME_LIMIT_S, EpisodeSpec
from oxygen_ros.sim.expert import expert_chunk
from oxygen_ros.sim.scene import JOINT_NAMES

from ..robot_bag import RobotBagWriter

NS = 1_000_000_000
CAMERAS = ("/camera/base/image_raw", "/camera/wrist/image_raw")
EPISODE_TOPIC = "/oxygen_sim_node/episode"
TRAJECTORY_TOPIC = "/joint_trajectory_controller/joint_trajectory"
GAP_S = 1.0  # between episodes: the next one starts a second after the last one ended


@dataclass(frozen=True)
class TabletopBagSpec:
    seeds: Sequence[int]
    control_period_s: float = 0.2
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    image_size: tuple[int, int] | None = None  # square: the policy's 64 x 64 by default
    camera_every_steps: int = 1
    image_format: str = "raw"
    instruction_topic: str = "/instruction"
    joint_state_topic: str = "/joint_states"


def record_tabletop_bag(path: str | Path, spec: TabletopBagSpec, *, storage: str | None = None, overwrite: bool = False,
                        on_step: Callable[[int, int], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Write the expert's episodes of ``spec`` to ``path``; returns a summary (topics, episodes, success)."""
    size = (spec.image_size or (64, 64))[0]
    if spec.image_size and spec.image_size[0] != spec.image_size[1]:
        raise ValueError(f"the table-top cameras render square images, got {spec.image_size[0]}x{spec.image_size[1]}")
    period = spec.control_period_s
    steps_per_episode = round(spec.time_limit_s / period)
    total = len(spec.seeds) * steps_per_episode
    episodes: list[dict[str, Any]] = []
    clock_ns = NS  # sim time starts at 1 s (a node on sim time reads 0 before the first /clock)
    done = 0
    with RobotBagWriter(path, image_format=spec.image_format, storage=storage, overwrite=overwrite) as bag:
        for index, seed in enumerate(spec.seeds):
            episode = EpisodeSpec.from_seed(seed).make_episode(period, spec.time_limit_s)
            start = clock_ns
            bag.string(spec.instruction_topic, episode.spec.instruction, start, latched=True)
            bag.event(EPISODE_TOPIC, start, event="start", index=index, seed=seed)
            k = 0
            while not episode.done:
                now = start + round(k * period * NS)
                bag.joint_state(spec.joint_state_topic, JOINT_NAMES, episode.scene.q, now)
                if k % spec.camera_every_steps == 0:
                    for topic, rgb in zip(CAMERAS, episode.images(size)):
                        bag.image(topic, rgb, now, frame_id=topic.split("/")[2])
                command = expert_chunk(episode.scene, episode.target, 1, period)[0].astype(np.float64)
                episode.deliver(TimedTrajectory(JOINT_NAMES, np.array([period]), command[None, :]))
                bag.trajectory(TRAJECTORY_TOPIC, JOINT_NAMES, command[None, :], [period], now, stamp_ns=now)
                episode.advance(episode.time_s + period)
                k += 1
                done += 1
                if on_step is not None:
                    on_step(done, total)
            end = start + round(episode.time_s * NS)
            bag.event(EPISODE_TOPIC, end, event="end", index=index, seed=seed, success=episode.succeeded, steps=k)
            episodes.append({"seed": seed, "success": episode.succeeded, "steps": k})
            clock_ns = end + round(GAP_S * NS)
            done = (index + 1) * steps_per_episode
    ok = sum(e["success"] for e in episodes)
    return {**bag.summary(), "episodes": episodes, "success_rate": ok / len(episodes)}
