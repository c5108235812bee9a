"""The ALOHA closed loop in one process, over DDS: ``oxygen_node`` (a robot config such as
``config/robots/aloha.yaml``) drives ``oxygen_sim_node``'s MuJoCo ALOHA in lockstep.

What ``oxygen-sim eval --env aloha_transfer_cube --through-node`` and ``oxygen-sim expert --through-outputs`` run,
and the tests. It is the loop without DDS (``oxygen_ros.sim.evaluate`` on ``sim.aloha.episode``) over DDS: the
same drivers, frames at the same steps, each episode's action noise seeded by its seed at its start, so the same
seeds give the same chunks and outcomes (a test checks it). Both nodes are the real ones on one rclpy context, talking through DDS on loopback; the node's
policy is its real runtime (a checkpoint) or, for ``through_outputs``, the same runtime whose action sampler
returns the scripted expert's actions expressed as the model's normalized output, so everything after the
network (unnormalization, relative actions, the embodiment's transforms, the config's conversions and
controllers, DDS, the simulated drivers) runs as it would for a trained model.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_ros.runtime.params_file import read_params_file
from oxygen_ros.runtime.paths import with_resolved_paths

log = logging.getLogger(__name__)

NODE_NAME = "oxygen_node"


@dataclass
class LoopResult:
    episodes: list[dict]  # one per episode: seed, success, success_step, steps, best_reward
    sim_stats: dict[str, Any]  # the simulator's counters: queries, answers, timeouts, rejected, render_s, frames
    diagnostics: dict[str, Any]  # the policy node's: chunks, deadline_misses (wall time), skipped ticks
    wall_s: float
    sim_s: float
    query_every_steps: int
    frames: list[np.ndarray] = field(default_factory=list)  # the GIF's frames (cam_high), when recorded

    @property
    def success_rate(self) -> float:
        return sum(e["success"] for e in self.episodes) / max(1, len(self.episodes))


def node_values(params_file: Path, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The policy node's parameters of a params file (paths resolved as the node resolves them) + overrides."""
    values, _ = read_params_file(params_file, node=NODE_NAME)
    values = with_resolved_paths(values, Path(params_file).resolve().parent.parent)
    values.update(overrides or {})
    return values


def interbotix_params(outputs: Any) -> dict[str, Any]:
    """The simulator's Interbotix parameters for outputs that command xs_sdk (joint_group arms and joint_single
    grippers on /<robot>/commands/...): the robots, left then right (by their joints' left_/right_ prefix), and the
    group and gripper names; none for ros2_control outputs."""
    groups = [s for s in outputs if s.type == "joint_group"]
    singles = [s for s in outputs if s.type == "joint_single"]
    if not groups:
        return {}
    suffix = "/commands/joint_group"
    robots = []
    for side in ("left_", "right_"):
        spec = next((s for s in groups if s.joints and s.joints[0].startswith(side)), None)
        if spec is None or not spec.topic.endswith(suffix):
            raise ValueError(f"the joint_group outputs must command one {side.rstrip('_')} arm each on /<robot>{suffix}")
        robots.append(spec.topic[: -len(suffix)].lstrip("/"))
    wrong = [s.topic for s in singles if s.topic.lstrip("/") not in (f"{r}/commands/joint_single" for r in robots)]
    if wrong or len(singles) != 2 or len({s.group for s in groups}) != 1 or len({s.group for s in singles}) != 1:
        raise ValueError(f"the joint_single outputs must command each robot's gripper on /<robot>/commands/joint_single, "
                         f"one group name and one gripper name for both robots (robots {robots}, topics {wrong})")
    return {"interbotix_robots": robots, "interbotix_arm_group": groups[0].group, "interbotix_gripper": singles[0].group}


def query_period_steps(node: Any, dt_s: float) -> int:
    """How many simulator steps pass between two chunks of the node: its tick, or n_action_steps steps."""
    rt, s = node.runtime, node.settings
    if rt.config.replan == "n_action_steps":
        period = rt.n_action_steps * s.step_period_s
    else:
        period = s.tick_period_s
    steps = round(period / dt_s)
    if steps < 1 or abs(steps * dt_s - period) > 1e-6:
        raise ValueError(f"the node's chunk period {period:g} s is not a whole number of the simulator's {dt_s:g} s steps")
    return steps


def run_loop(
    values: Mapping[str, Any],
    seeds: list[int],
    task: str = "transfer_cube",
    *,
    runtime_loader: Callable[[Any], Any] | None = None,
    image_size: tuple[int, int] | None = None,
    fast_render: bool = False,
    episode_steps: int = 400,
    gif_every_steps: int = 0,
    gif_size: tuple[int, int] = (240, 320),
    timeout_s: float = 3600.0,
    on_ready: Callable[[Any, Any], None] | None = None,
) -> LoopResult:
    """Run ``seeds`` episodes of the ALOHA ``task`` with the policy node configured by ``values``.

    ``runtime_loader`` replaces ``PolicyRuntime.load`` (see ``through_outputs``); ``on_ready(policy_node,
    sim_node)`` runs once both exist. ``image_size`` (height, width): the cameras' (default: the model's, square,
    as the loop without DDS renders them). ``gif_every_steps`` > 0 records cam_high of the first episode that
    often, at ``gif_size`` (height, width).
    """
    import rclpy
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.parameter import Parameter

    from oxygen_ros.sim.aloha.units import DT

    from oxygen_ros.sim_ros.aloha_sim_node import AlohaSimNode
    from oxygen_ros.ros.node import OxygenNode

    context = rclpy.Context()
    rclpy.init(context=context)
    nodes: list[Any] = []
    executor = MultiThreadedExecutor(num_threads=4, context=context)
    try:
        params = [Parameter(k, value=v) for k, v in values.items() if not (isinstance(v, list) and not v)]
        params.append(Parameter("use_sim_time", value=True))
        policy = OxygenNode(NODE_NAME, runtime_loader=runtime_loader, parameter_overrides=params, context=context)
        nodes.append(policy)
        period = query_period_steps(policy, DT)
        height, width = image_size or (policy.runtime.image_size,) * 2
        sim_params = {"task": task, "episodes": len(seeds), "seed": 0, "episode_steps": episode_steps,
                      "image_height": height, "image_width": width, "fast_render": fast_render,
                      "query_every_steps": period, "instruction_topic": f"/{NODE_NAME}/instruction"}  # fmt: skip
        arms = policy.settings.joint_sources
        if len(arms) == 2:  # the policy reads each puppet's joint states on its own topic, as Interbotix publishes them
            sim_params["arm_joint_state_topics"] = [a.topic for a in arms]
        sim_params.update(interbotix_params(policy.settings.outputs))
        sim = AlohaSimNode(parameter_overrides=[Parameter(k, value=v) for k, v in sim_params.items()], context=context,
                           seeds=seeds)  # fmt: skip
        nodes.append(sim)
        # Each episode's action noise from its seed, its text schedule from its start, as the loop without DDS
        # (OxygenNode.start_episode): the same seeds give the same chunks and outcomes on both paths.
        sim.on_episode_start = lambda record: policy.start_episode(record.seed)
        frames: list[np.ndarray] = []
        if gif_every_steps > 0:
            sim.on_step = lambda d: _record(d, frames, gif_every_steps, *gif_size)
        if on_ready is not None:
            on_ready(policy, sim)
        listener = _DiagnosticsListener(context)
        nodes.append(listener)
        for node in nodes:
            executor.add_node(node)
        started = time.perf_counter()
        sim.start()
        deadline = time.monotonic() + timeout_s
        while not sim.done.is_set() and time.monotonic() < deadline:
            _spin_once(executor)
        wall_s = time.perf_counter() - started
        sim.shutdown()
        finishing = threading.Thread(target=policy.finish, daemon=True)  # stops its model thread; we keep spinning
        finishing.start()
        while finishing.is_alive():
            _spin_once(executor)
        diag = dict(listener.latest)
        return LoopResult([e.as_dict("end") for e in sim.driver.episodes], dict(sim.stats), diag, wall_s,
                          sim.driver.time_ns / 1e9, period, frames)  # fmt: skip
    finally:
        executor.shutdown(timeout_sec=5.0)
        for node in reversed(nodes):
            node.destroy_node()
        rclpy.try_shutdown(context=context)


def _spin_once(executor: Any) -> None:
    from rclpy.exceptions import InvalidHandle

    try:
        executor.spin_once(timeout_sec=0.05)
    except InvalidHandle:  # a node destroyed an entity the executor was waiting on (as main.py): not in the next set
        pass


class _DiagnosticsListener:
    """Keeps the latest values of the policy node's /diagnostics statuses (control, inputs), by key."""

    def __new__(cls, context: Any) -> Any:  # a Node built here: rclpy is imported lazily in this module
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.node import Node
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        from oxygen_ros.ros.robot_ports import diagnostics_prefix

        node = Node("aloha_loop_diagnostics", context=context)
        node.latest = {}

        def keep(msg: Any) -> None:
            for status in msg.status:
                if status.name.startswith(diagnostics_prefix("")):
                    node.latest.update({kv.key: kv.value for kv in status.values})

        node.create_subscription(DiagnosticArray, "/diagnostics", keep, QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
        return node


def through_outputs(params_file: Path, seeds: list[int], workdir: Path, **loop_args: Any) -> tuple[LoopResult, Any]:
    """The scripted expert's actions as model outputs through the node configured by ``params_file`` (its
    conversions, outputs and controllers) into the MuJoCo ALOHA. The file's checkpoint is replaced by a small
    ALOHA-shaped one (its statistics, openpi's layout and asset id) and the engine runs action_only on the CPU;
    returns the loop's result and the scripted runtime (chunks served, stale frames)."""
    from oxygen_ros.sim.aloha.checkpoint import write_small_checkpoint
    from oxygen_ros.sim.aloha.scripted_runtime import ExpertAsModel, Observed

    checkpoint, tokenizer = write_small_checkpoint(workdir)
    values = node_values(params_file, {"checkpoint": str(checkpoint), "tokenizer": str(tokenizer), "device": "cpu",
                                       "dtype": "float32", "engine_mode": "action_only", "num_threads": 1})  # fmt: skip
    sims: list[Any] = []

    def observe() -> Observed:
        driver = sims[0].driver
        record = driver.episodes[-1]
        return Observed(record.seed, record.steps, driver.time_ns, driver.dataset_state())

    expert = ExpertAsModel(observe)
    result = run_loop(values, seeds, runtime_loader=expert.load, on_ready=lambda _, sim: sims.append(sim), **loop_args)
    return result, expert


def _record(driver: Any, frames: list[np.ndarray], every: int, height: int, width: int) -> None:
    if len(driver.episodes) == 1 and driver.episode is not None and driver.episodes[0].steps % every == 0:
        frames.append(driver.physics.render("top", height, width))
