"""A RobotClient-shaped gRPC client for the fleet benchmark (``python -m oxygen_ros.serve.bench --protocol lerobot``).

It does what LeRobot's ``RobotClient`` does on the wire (``Ready``, ``SendPolicyInstructions``, then a chunked
``SendObservations`` and a ``GetActions`` per chunk), with pickles shaped as lerobot's, and no think time: each
observation is sent (``must_go``) as soon as the previous chunk arrived. The robot it describes has the
parameters file's joints (``<joint>.pos``) and one camera per image feature of the checkpoint.
"""

from __future__ import annotations

import json
import time
from typing import Any

import grpc
import numpy as np

from ..timed_window import WARM_REQUESTS, timed_requests
from . import services_pb2 as pb
from . import services_pb2_grpc as pb_grpc
from .pickles import PolicySetup, TimedObservation, dumps_lerobot, make
from .transfer import send_chunks

IMAGE_SIDE = 96


def robot_description(params_file: str) -> str:
    """The checkpoint, joints and cameras the benchmark's robots describe (JSON: it crosses to spawned processes)."""
    from oxygen_ros.runtime.cameras import slot_names_of

    from ..cli import load_config

    config, values = load_config(params_file)
    return json.dumps({"checkpoint": config.checkpoint, "joints": list(values.get("joint_names") or []),
                       "cameras": list(slot_names_of(config))})  # fmt: skip


def _robot(description: str, seed: int) -> tuple[bytes, dict[str, Any]]:
    robot = json.loads(description)
    rng = np.random.default_rng(seed)
    names = [f"{joint}.pos" for joint in robot["joints"]]
    features: dict[str, Any] = {"observation.state": {"dtype": "float32", "shape": (len(names),), "names": names}}
    observation: dict[str, Any] = {name: float(rng.uniform(-0.3, 0.3)) for name in names}
    for camera in robot["cameras"]:
        name = camera.removeprefix("observation.images.")
        features[f"observation.images.{name}"] = {"dtype": "image", "shape": (IMAGE_SIDE, IMAGE_SIDE, 3),
                                                  "names": ["height", "width", "channels"]}  # fmt: skip
        observation[name] = rng.integers(0, 256, (IMAGE_SIDE, IMAGE_SIDE, 3), dtype=np.uint8)
    observation["task"] = "Transfer cube"
    setup = make(PolicySetup, policy_type="pi05", pretrained_name_or_path=robot["checkpoint"], lerobot_features=features,
                 actions_per_chunk=50, device="cpu", rename_map={})  # fmt: skip
    return dumps_lerobot(setup), observation


def lerobot_client(port: int, description: str, seed: int, start_at: float, seconds: float, out: Any) -> None:
    """One robot: warm-up chunks until ``start_at``, then chunks back to back for ``seconds``; latencies to ``out``."""
    try:
        setup, observation = _robot(description, seed)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
        stub = pb_grpc.AsyncInferenceStub(channel)
        deadline = time.monotonic() + 60
        while True:  # the previous fleet's slots come back once those clients are silent for --idle-release-s
            try:
                stub.Ready(pb.Empty())
                break
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        stub.SendPolicyInstructions(pb.PolicySetup(data=setup))
        step = 0

        def chunk() -> None:
            nonlocal step
            timed = make(TimedObservation, timestamp=time.time(), timestep=step, observation=observation, must_go=True)
            stub.SendObservations(iter(send_chunks(dumps_lerobot(timed), pb.Observation)))
            while not stub.GetActions(pb.Empty()).data:  # empty: no observation was due in time
                pass
            step += 1

        for _ in range(WARM_REQUESTS):
            chunk()
        if time.time() > start_at:  # a late start would shorten this client's window and understate the rate
            raise RuntimeError("the client was not ready at the start time (a machine too busy)")
        while time.time() < start_at - 1.0:  # warm until the start: a silent client would lose its slot
            chunk()
        latencies = timed_requests(chunk, start_at, seconds)
        channel.close()
        out.put(latencies)
    except Exception as exc:  # noqa: BLE001 - reported by the parent
        out.put(f"{type(exc).__name__}: {exc}")
