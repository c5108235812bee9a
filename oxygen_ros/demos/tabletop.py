"""The README's main job: the trained demo policy drives the simulated arm over real DDS and explains itself.

1. start ``oxygen_sim_node`` (``config/demo_sim.yaml``) and ``oxygen_node`` with the trained demo policy
   (``config/demo_policy.yaml``), each in its own process;
2. run a few episodes with different instructions; print the narration and the memory notes as they stream,
   ask the policy two questions per episode over ``~/ask`` (where the named object is, what the gripper
   holds), each answer marked ✓/✗ against the simulator's truth at the frame it was answered from, and
   each episode's outcome;
3. write an animated GIF of one episode with the streamed text as captions, and a PNG summary.

``--robots N`` (N > 1) runs N simulated arms, each in its own namespace (``/arm1``, ``/arm2``, ...) with its
own scenes and instructions, all driven by ONE ``oxygen_node`` (its ``robots`` parameter): one model in memory,
every arm's frames in one batched engine tick; each arm's results go to ``<out>/<arm>``.

Run it through ``scripts/demo.sh``, which also keeps DDS on loopback.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

from oxygen_ros.demos.listener import (ROBOTS, Listener, add_run_args, check_run_rules, report_figures, say, spin_until,
                                       say_tools, start_policy, start_sim, stop, wait_for_policy, write_episode_gif)  # fmt: skip
from oxygen_ros.sim.media import write_summary

DEMO_SEED = 40  # the demo's first held-out scene seed (its instructions name different objects)


def robot_names(count: int) -> list[str]:
    """The arms' namespaces: none for one arm (topics as in the params files), arm1..armN for several."""
    return [f"arm{i + 1}" for i in range(count)] if count > 1 else []


def run(episodes: int, seed: int, outdir: Path, policy_params: Path, sim_params: Path, robots: int = 1) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    names = robot_names(robots)
    served = f" serving {len(names)} arms ({', '.join(names)}) from one model" if names else ""
    say(f"[1/3] starting oxygen_node with the trained demo policy ({policy_params.name}){served}")
    policy = start_policy(policy_params, ["-p", f"robots:=[{','.join(names)}]"] if names else [])
    sims: list[subprocess.Popen] = []
    rclpy.init()
    executor = SingleThreadedExecutor()
    arms = names or [""]
    nodes = [rclpy.create_node("oxygen_demo_listener", namespace=f"/{arm}" if arm else None) for arm in arms]
    listeners = [Listener(node, f"[{arm}] " if arm else "") for node, arm in zip(nodes, arms)]
    for node in nodes:
        executor.add_node(node)
    started = time.monotonic()
    try:
        if not wait_for_policy(executor, nodes, policy):
            return 1
        say(f"[2/3] starting oxygen_sim_node ({sim_params.name}){f' x {len(names)}' if names else ''}: {episodes} "
             "episodes each; narration and memory as they stream, ✓/✗ against the simulator's truth")  # fmt: skip
        # The simulator waits for the policy and for this listener, and stays up until stopped here, so no
        # episode report is lost to discovery delays.
        for i, arm in enumerate(arms):
            sim_args = ["-p", f"episodes:={episodes}", "-p", f"seed:={seed + i * episodes}", "-p", "viewer_size:=192",
                        "-p", "exit_when_done:=false", "-p", "wait_for_commander_s:=60.0", "-p", "wait_for_listener:=true",
                        *(["-r", f"__ns:=/{arm}"] if arm else [])]  # fmt: skip
            sims.append(start_sim(sim_params, sim_args))
        all_ended = lambda: all(lst.ended >= episodes for lst in listeners)  # noqa: E731
        spin_until(executor, lambda: all_ended() or any(p.poll() is not None for p in sims), 30.0 * episodes + 90)
        spin_until(executor, all_ended, 5.0)
    finally:
        stop(*sims, policy)
        executor.shutdown()
        for node in nodes:
            node.destroy_node()
        rclpy.shutdown()
    elapsed = time.monotonic() - started
    codes = [_report(lst, outdir / arm if arm else outdir, elapsed, f"{arm}: " if arm else "") for lst, arm in zip(listeners, arms)]
    return max(codes)


def _report(listener: Listener, outdir: Path, elapsed: float, who: str = "") -> int:
    logs = report_figures(listener, elapsed, who)
    if not logs:
        return 1
    write_episode_gif(logs, outdir / "demo_episode.gif")
    png = write_summary(logs, outdir / "demo_summary.png")
    say(f"  wrote {png}")
    say_tools("`oxygen-sim eval --episodes 20 --seed 0` (the success rate over 20 held-out scenes, no DDS)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo.sh",
                                     description="oxygen_ros demo: the trained policy drives the simulated arm over DDS")
    parser.add_argument("--robot", choices=ROBOTS, default="tabletop",
                        help="tabletop: the package's own arm (default); aloha: the MuJoCo ALOHA (its own options: "
                        "--robot aloha --help)")  # fmt: skip
    add_run_args(parser, DEMO_SEED, "demo", "demo_policy.yaml", "demo_sim.yaml")
    parser.add_argument("--robots", type=int, default=1,
                        help="simulated arms, each in its own namespace, all driven by one oxygen_node (default 1)")
    args = parser.parse_args(argv)
    if not 1 <= args.robots <= 8:
        parser.error(f"--robots must be 1..8, got {args.robots}")
    check_run_rules(parser, args.policy_params, "demo_policy.yaml", "models/demo", "oxygen-train-demo")
    return run(args.episodes, args.seed, args.out.resolve(), args.policy_params.resolve(), args.sim_params.resolve(),
               args.robots)
