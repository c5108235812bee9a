"""``oxygen-serve``: the node's runtime and engine behind openpi's websocket policy protocol, or LeRobot's
async-inference gRPC protocol (``--protocol lerobot``), without ROS.

    oxygen-serve --params-file config/aloha_demo.yaml [--port 8000] [--host 127.0.0.1] [--default-prompt ...]
    oxygen-serve --protocol lerobot --params-file config/robots/so101.yaml [--port 8080]

The parameters file is the node's: the checkpoint, engine and text tasks are read as the node reads them; the
ROS wiring (topics, joint conversions, outputs) is not used: openpi's clients send the state and receive the
actions in openpi's conventions (the embodiment adapter's), as openpi's own server does.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from oxygen_ros.engine.mode_names import FLEET_MODES
from oxygen_ros.runtime.params_file import ParamsFileError, read_params_file
from oxygen_ros.runtime.paths import with_resolved_paths
from oxygen_ros.runtime.reset_pose import reset_pose

from .layouts import LAYOUTS, layout_for

if TYPE_CHECKING:  # torch and the model: loaded by build(), after the command line is read
    from oxygen_ros.runtime import PolicyRuntime, RuntimeConfig

    from .lerobot.server import LeRobotServer
    from .scheduler import FleetScheduler
    from .server import PolicyServer

PROTOCOLS = ("openpi", "lerobot")
AUTO_LAYOUT = "auto"  # --layout auto: the layout of the embodiment the loaded checkpoint decides

log = logging.getLogger("oxygen_ros.serve")
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def load_config(params_file: str, node: str | None = None) -> tuple[RuntimeConfig, dict]:
    """The runtime configuration of a node parameters file, without the ROS side's joint conversions, and the
    file's values."""
    from oxygen_ros.interface.settings import settings_from_values

    values, _ = read_params_file(params_file, node=node)
    values = with_resolved_paths(values, Path(params_file).resolve().parent.parent)
    _, config = settings_from_values(values)
    return dataclasses.replace(config, joint_conversions=[]), values


def served_metadata(layout_metadata: dict, values: dict) -> dict:
    """The layout's metadata, with the parameters file's ``reset_pose`` (the pose openpi's ALOHA client moves its
    arms to) where the file sets one."""
    pose = reset_pose(values)
    return {**layout_metadata, "reset_pose": list(pose)} if pose else dict(layout_metadata)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="oxygen-serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--params-file", required=True, help="the node's parameters file (checkpoint, engine, text tasks)")
    p.add_argument("--node-name", default=None, help="which node's parameters, when the file holds several")
    p.add_argument("--protocol", choices=PROTOCOLS, default="openpi",
                   help="openpi's websocket protocol (default) or LeRobot's async-inference gRPC (docs/serve.md)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    p.add_argument("--port", type=int, default=None,
                   help="TCP port (0: any free one; default 8000, openpi's, or 8080, lerobot's policy server's)")
    p.add_argument("--default-prompt", default=None, help="the prompt of requests that send none (openpi's option)")
    p.add_argument("--api-key", default=None, help="refuse handshakes without 'Authorization: Api-Key <key>' (401)")
    p.add_argument("--max-message-bytes", type=int, default=16 * 1024 * 1024,
                   help="largest request accepted; a bigger one closes the connection with 1009 (default 16 MiB)")
    p.add_argument("--max-clients", type=int, default=8,
                   help="robots served at once (each has a KV reserve; default %(default)s)")
    p.add_argument("--layout", choices=[*sorted(LAYOUTS), AUTO_LAYOUT], default=AUTO_LAYOUT,
                   help="openpi observation keys (default auto: the parameters file's embodiment, or, where that is "
                   "auto, the one the checkpoint's openpi asset id names)")
    p.add_argument("--metadata", default=None, help="JSON map sent first on each connection (default: the layout's)")
    p.add_argument("--engine-mode", choices=FLEET_MODES, default=None,
                   help="override the parameters file's engine_mode (action_only: chunks without text)")
    p.add_argument("--one-at-a-time", action="store_true", help="one request per engine tick, as openpi's server")
    p.add_argument("--batch-window-ms", type=float, default=10.0,
                   help="how long a tick waits for the other connected robots' requests (default 10)")
    p.add_argument("--answer-max-tokens", type=int, default=24,
                   help="token limit of an answer to a request's 'ask' (default %(default)s)")
    p.add_argument("--log-period-s", type=float, default=10.0,
                   help="period in seconds of the fleet's rate and latency line (default %(default)s)")
    lr = p.add_argument_group("LeRobot protocol (--protocol lerobot)")
    lr.add_argument("--policy-alias", action="append", default=[],
                    help="a pretrained_name_or_path clients may give for the served checkpoint (e.g. its hub id; "
                    "repeatable); its folder path and name are always accepted")
    lr.add_argument("--fps", type=float, default=30.0, help="spacing 1/fps of the returned actions' timestamps")
    lr.add_argument("--obs-queue-timeout", type=float, default=2.0,
                    help="seconds GetActions waits for an observation before an empty reply (lerobot's)")
    lr.add_argument("--idle-release-s", type=float, default=10.0,
                    help="a client silent this long gives its robot slot back (default %(default)s)")
    lr.add_argument("--max-observation-bytes", type=int, default=64 * 1024 * 1024,
                    help="largest pickled observation accepted, checked before unpickling (default 64 MiB)")
    lr.add_argument("--tls-cert", default=None, help="PEM certificate chain: serve over TLS (with --tls-key)")
    lr.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    return p


def build(args: argparse.Namespace) -> PolicyServer | LeRobotServer:
    """Load the runtime and wire the server; raises ValueError / RuntimeLoadError saying what is wrong."""
    if args.max_message_bytes < 1024:
        raise ValueError("--max-message-bytes must be at least 1024")
    metadata = json.loads(args.metadata) if args.metadata else None
    if metadata is not None and not isinstance(metadata, dict):
        raise ValueError("--metadata must be a JSON map")
    from oxygen_ros.runtime.policy import PolicyRuntime

    from .scheduler import FleetScheduler
    from .server import PolicyServer, ServeOptions

    config, values = load_config(args.params_file, args.node_name)
    if args.engine_mode:
        config = dataclasses.replace(config, engine_mode=args.engine_mode)
    override = None if args.layout == AUTO_LAYOUT else args.layout
    if override is None and config.embodiment != "auto" and args.protocol == "openpi":
        layout_for(config.embodiment)  # refused before the model is loaded
    runtime = PolicyRuntime.load(config)
    scheduler = FleetScheduler(runtime, max_robots=args.max_clients, one_at_a_time=args.one_at_a_time,
                               batch_window_s=args.batch_window_ms / 1000, answer_max_tokens=args.answer_max_tokens)
    if args.protocol == "lerobot":
        return _lerobot_server(args, runtime, scheduler, values)
    layout = layout_for(runtime.adapter.name, override)  # embodiment auto: the checkpoint's openpi asset id decided
    if metadata is None:
        metadata = served_metadata(layout.metadata, values)
    options = ServeOptions(args.host, 8000 if args.port is None else args.port, args.api_key, args.default_prompt, args.max_message_bytes,
                           args.log_period_s, metadata)  # fmt: skip
    return PolicyServer(scheduler, layout, options)


def _lerobot_server(args: argparse.Namespace, runtime: PolicyRuntime, scheduler: FleetScheduler,
                    values: dict) -> LeRobotServer:  # fmt: skip
    """LeRobot's clients send their motors as ``<joint>.pos`` (the parameters file's joint_names) and their
    cameras as the checkpoint's image features."""
    from .lerobot.binding import ServedPolicy
    from .lerobot.server import GrpcOptions, LeRobotServer
    from .lerobot.service import LeRobotOptions

    joints = tuple(values.get("joint_names") or ())
    served = ServedPolicy(runtime.config.checkpoint, runtime.image_slot_names, tuple(f"{j}.pos" for j in joints),
                          runtime.state_dim, runtime.checkpoint_info.chunk_length, tuple(args.policy_alias))  # fmt: skip
    options = LeRobotOptions(args.default_prompt, args.fps, args.obs_queue_timeout, args.idle_release_s,
                             max_observation_bytes=args.max_observation_bytes)  # fmt: skip
    grpc_options = GrpcOptions(args.host, 8080 if args.port is None else args.port, args.api_key, args.tls_cert,
                               args.tls_key, args.log_period_s)  # fmt: skip
    return LeRobotServer(scheduler, served, options, grpc_options)


async def _serve(server: PolicyServer | LeRobotServer) -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)  # type: ignore[union-attr]
    try:
        await server.run()
    except asyncio.CancelledError:
        log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] [oxygen-serve] %(message)s", stream=sys.stderr)
    logging.getLogger("websockets").setLevel(logging.WARNING)  # its per-handshake lines; ours say who came and left
    args = parser().parse_args(argv)
    if args.host not in LOOPBACK:
        log.warning("binding %s: robots on other hosts can reach this server%s", args.host,
                    "" if args.api_key else " without an API key (set --api-key)")
    from oxygen_ros.interface.settings import ConfigError
    from oxygen_ros.runtime.policy import RuntimeLoadError

    try:
        server = build(args)
    except (ParamsFileError, ConfigError, RuntimeLoadError, ValueError) as exc:
        print(f"oxygen-serve: {exc}", file=sys.stderr)
        return 2
    # The loaded model is ~300k objects that live as long as the process; a full collection walks them all
    # (about 300 ms on a 2-core machine), holding the GIL and so the event loop. Frozen, they are skipped.
    gc.collect()
    gc.freeze()
    server.scheduler.start()
    try:
        asyncio.run(_serve(server))
    finally:
        server.scheduler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
