"""The MuJoCo ALOHA driven through oxygen-serve by openpi's own client, as openpi's ``examples/aloha_sim`` does.

    python -m oxygen_ros.serve.aloha_client_loop --openpi-client ~/.cache/oxygen_ros/openpi-client/v0.1.2 \\
        --params-file config/aloha_demo.yaml --seed 0 --episodes 10

Starts oxygen-serve on a free loopback port (or uses ``--port``), then per held-out seed: a new
``WebsocketClientPolicy`` connection (a new episode) wrapped in ``ActionChunkBroker``; each control step sends
the ALOHA observation keys (``state``: gym-aloha's ``agent_pos``; ``images``: CHW uint8 ``cam_high``, and the
wrist cameras the policy was trained with) and applies the broker's action; success = reward 4 within the
episode's 400 steps. Cameras are rendered only on the steps where the broker asks the server. Prints one
JSON line: per-seed success and the success rate; compare ``oxygen-sim eval --env aloha_transfer_cube`` on the
same seeds (the ROS path's runtime).

openpi-client pins numpy < 2; its modules are pure Python, so this tool imports the installed package from
the given venv (``--openpi-client``: the venv, or its site-packages) beside this project's numpy.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_ros.sim.aloha.dataset import INSTRUCTION
from oxygen_ros.sim.aloha.env import AlohaEnv
from oxygen_ros.sim.aloha.expert import EPISODE_STEPS

from .bench import server

CAMERAS = ("cam_high", "cam_left_wrist", "cam_right_wrist")


def import_openpi_client(location: str) -> Any:
    """openpi_client from a venv (or site-packages folder), without that venv's numpy."""
    root = Path(location).expanduser()
    found = sorted(root.glob("lib/python*/site-packages/openpi_client")) or sorted(root.glob("openpi_client"))
    if not found:
        raise SystemExit(f"no openpi_client package under {root} (pip install openpi-client in that venv)")
    shim = Path(tempfile.mkdtemp(prefix="openpi_client_"))
    (shim / "openpi_client").symlink_to(found[0])
    sys.path.insert(0, str(shim))
    import openpi_client.action_chunk_broker
    import openpi_client.websocket_client_policy

    return openpi_client


def run_episode(client: Any, port: int, seed: int, replan_steps: int, image_size: int) -> dict[str, Any]:
    env = AlohaEnv(fast_render=True)  # the look the policy was trained on, as the ROS path renders it
    state = env.reset(seed)
    policy = client.websocket_client_policy.WebsocketClientPolicy("127.0.0.1", port)
    broker = client.action_chunk_broker.ActionChunkBroker(policy, replan_steps)
    obs: dict[str, Any] = {}
    t0 = time.perf_counter()
    for step in range(EPISODE_STEPS):
        if step % replan_steps == 0:  # the broker asks the server now: a fresh observation
            images = env.images(image_size, image_size, CAMERAS)
            obs = {"state": state, "images": {c: np.ascontiguousarray(im.transpose(2, 0, 1)) for c, im in images.items()}}
        else:
            obs = {"state": state, "images": obs["images"]}  # not sent: the broker answers from its chunk
        action = broker.infer(obs)["actions"]
        env.step(action)
        state = env.state()
        if env.success:
            break
    policy._ws.close()  # the client has no close(); a robot's process would exit
    return {"seed": seed, "success": env.success, "steps": env.steps, "wall_s": round(time.perf_counter() - t0, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m oxygen_ros.serve.aloha_client_loop", description=__doc__.split("\n\n")[0])
    p.add_argument("--openpi-client", required=True, help="a venv (or site-packages) with openpi-client installed")
    p.add_argument("--params-file", default="config/aloha_demo.yaml")
    p.add_argument("--port", type=int, default=None, help="a running oxygen-serve (default: start one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--replan-steps", type=int, default=25, help="ActionChunkBroker horizon (the params file's n_action_steps)")
    p.add_argument("--image-size", type=int, default=96, help="rendered camera size (the policy's; the node renders 96)")
    args = p.parse_args(argv)
    client = import_openpi_client(args.openpi_client)
    serving = nullcontext(args.port) if args.port else server(args.params_file, "--default-prompt", INSTRUCTION)
    with serving as port:
        episodes = [run_episode(client, port, s, args.replan_steps, args.image_size) for s in range(args.seed, args.seed + args.episodes)]
    rate = sum(e["success"] for e in episodes) / len(episodes)
    print(json.dumps({"success_rate": rate, "seeds": [args.seed, args.seed + args.episodes - 1], "episodes": episodes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
