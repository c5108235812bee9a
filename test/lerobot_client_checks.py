"""Run in the lerobot 0.6.1 environment (scripts/extra_envs.py): LeRobot's own RobotClient with a fake SO-101.

    python lerobot_client_checks.py PORT CHECKPOINT OBSERVATION.npz OUT.json [ACTIONS_TO_RUN]
    python lerobot_client_checks.py hostile PORT CHECKPOINT MARKER

``FakeSO101Config`` is registered as a robot type and ``FakeSO101`` sits in the same module (lerobot finds the
robot class by the config's name without "Config"): six ``<joint>.pos`` floats and front/wrist cameras, all
read from OBSERVATION.npz, and the actions it is sent recorded. The client runs as lerobot's ``async_client``
runs it (``start``, a ``receive_actions`` thread, ``control_loop``) until its robot performed ACTIONS_TO_RUN
actions; the first chunk it received (as its ``pickle.loads`` built it) and the performed actions go to OUT.json.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot.async_inference.configs import RobotClientConfig
from lerobot.async_inference.robot_client import RobotClient
from lerobot.robots.config import RobotConfig
from lerobot.robots.robot import Robot

JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
SOURCE: dict[str, Any] = {}  # the observation file's arrays


@RobotConfig.register_subclass("fake_so101")
@dataclass
class FakeSO101Config(RobotConfig):
    cameras: dict = field(default_factory=dict)


class FakeSO101(Robot):
    config_class = FakeSO101Config
    name = "fake_so101"

    def __init__(self, config: FakeSO101Config) -> None:
        super().__init__(config)
        self.performed: list[list[float]] = []
        self._connected = False

    @property
    def observation_features(self) -> dict:
        return {**{f"{j}.pos": float for j in JOINTS}, **{c: SOURCE[c].shape for c in ("front", "wrist")}}

    @property
    def action_features(self) -> dict:
        return {f"{j}.pos": float for j in JOINTS}

    @property
    def is_connected(self) -> bool:
        return self._connected

    def connect(self, calibrate: bool = True) -> None:
        self._connected = True

    @property
    def is_calibrated(self) -> bool:
        return True

    def calibrate(self) -> None:
        pass

    def configure(self) -> None:
        pass

    def get_observation(self) -> dict[str, Any]:
        obs: dict[str, Any] = {f"{j}.pos": float(v) for j, v in zip(JOINTS, SOURCE["state"])}
        return {**obs, "front": SOURCE["front"].copy(), "wrist": SOURCE["wrist"].copy()}

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        self.performed.append([float(action[f"{j}.pos"]) for j in JOINTS])
        return action

    def disconnect(self) -> None:
        self._connected = False


class RunsCommand:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        import os

        return (os.system, (f"touch {self.marker}",))


def hostile(port: str, checkpoint: str, marker: str) -> int:
    import pickle

    import grpc

    from lerobot.async_inference.helpers import RemotePolicyConfig, TimedObservation
    from lerobot.transport import services_pb2, services_pb2_grpc
    from lerobot.transport.utils import grpc_channel_options, send_bytes_in_chunks

    stub = services_pb2_grpc.AsyncInferenceStub(grpc.insecure_channel(f"127.0.0.1:{port}", grpc_channel_options()))
    codes = {}

    def code(name: str, call: Any) -> None:
        try:
            call()
            codes[name] = "OK"
        except grpc.RpcError as exc:
            codes[name] = f"{exc.code().name}: {exc.details()}"

    stub.Ready(services_pb2.Empty())
    evil_setup = RemotePolicyConfig("pi05", checkpoint, {"x": RunsCommand(marker)}, 10)  # type: ignore[dict-item]
    code("setup", lambda: stub.SendPolicyInstructions(services_pb2.PolicySetup(data=pickle.dumps(evil_setup))))
    features = {"observation.state": {"dtype": "float32", "shape": (6,), "names": [f"{j}.pos" for j in JOINTS]},
                "observation.images.front": {"dtype": "image", "shape": (8, 8, 3), "names": ["height", "width", "channels"]}}
    good = RemotePolicyConfig("pi05", checkpoint, features, 10)
    code("good_setup", lambda: stub.SendPolicyInstructions(services_pb2.PolicySetup(data=pickle.dumps(good))))
    evil_obs = pickle.dumps(TimedObservation(0.0, 0, {"task": RunsCommand(marker)}, True))
    code("observation", lambda: stub.SendObservations(send_bytes_in_chunks(evil_obs, services_pb2.Observation)))
    begin_only = iter([services_pb2.Observation(transfer_state=services_pb2.TRANSFER_BEGIN, data=b"\x80\x04")])
    code("no_end", lambda: stub.SendObservations(begin_only))
    print(json.dumps(codes))
    return 0


def main() -> int:
    if sys.argv[1] == "hostile":
        return hostile(*sys.argv[2:5])
    port, checkpoint, source, out = sys.argv[1:5]
    to_run = int(sys.argv[5]) if len(sys.argv) > 5 else 10
    SOURCE.update(np.load(source))
    config = RobotClientConfig(policy_type="pi05", pretrained_name_or_path=checkpoint, robot=FakeSO101Config(),
                               actions_per_chunk=20, task=str(SOURCE["task"]), server_address=f"127.0.0.1:{port}",
                               fps=30, chunk_size_threshold=0.5, aggregate_fn_name="latest_only")  # fmt: skip
    client = RobotClient(config)
    chunks: list[list] = []
    aggregate = client._aggregate_action_queues

    def recording(incoming: list, aggregate_fn: Any = None) -> None:  # the chunks as the client unpickled them
        chunks.append(incoming)
        aggregate(incoming, aggregate_fn)

    client._aggregate_action_queues = recording  # type: ignore[method-assign]
    if not client.start():
        print(json.dumps({"error": "RobotClient.start() failed"}))
        return 1
    receiver = threading.Thread(target=client.receive_actions, daemon=True)
    loop = threading.Thread(target=client.control_loop, args=(config.task,), daemon=True)
    receiver.start()
    loop.start()
    deadline = time.monotonic() + 600
    while len(client.robot.performed) < to_run and time.monotonic() < deadline:
        time.sleep(0.05)
    client.stop()
    first = chunks[0] if chunks else []
    print(json.dumps({"classes": sorted({f"{type(a).__module__}.{type(a).__qualname__}" for a in first}),
                      "timesteps": [a.get_timestep() for a in first],
                      "first_chunk": [a.get_action().tolist() for a in first],
                      "chunks": len(chunks), "performed": client.robot.performed[:to_run]}))  # fmt: skip
    with open(out, "w") as f:
        f.write("ok")
    return 0 if len(client.robot.performed) >= to_run else 2


if __name__ == "__main__":
    sys.exit(main())
