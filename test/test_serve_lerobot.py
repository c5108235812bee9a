"""``oxygen-serve --protocol lerobot`` driven by a gRPC client written from LeRobot 0.6.1's protocol (its stubs'
service and messages, pickles shaped as its helpers'): SO-101 robots get the runtime's chunk for their
observation, several at once; hostile pickles, malformed streams, missing API keys and vanished clients are
refused or released and the server goes on."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml

from layouts import REF_TINY
from lerobot_so101 import TASK, expected_chunks, so101_params
from lerobot_shapes import load_actions, observation_bytes, setup_bytes, so101_features, so101_observation
from openpi_client_env import oxygen_serve
from oxygen_ros.serve.lerobot import services_pb2 as pb
from oxygen_ros.serve.lerobot import services_pb2_grpc as pb_grpc
from oxygen_ros.serve.lerobot.transfer import send_chunks

CAMERAS = {"front": (60, 80), "wrist": (48, 64)}
CALL_TIMEOUT_S = 120.0  # a busy 2-core machine; the model is tiny


class Robot:
    """One robot's channel (its own connection: the server tells robots apart by their gRPC peer)."""

    def __init__(self, port: int, metadata: tuple = ()) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
        self.stub = pb_grpc.AsyncInferenceStub(self.channel)
        self.metadata = metadata

    def start(self, checkpoint: str, actions_per_chunk: int = 50) -> None:
        self.stub.Ready(pb.Empty(), timeout=CALL_TIMEOUT_S, metadata=self.metadata)
        setup = pb.PolicySetup(data=setup_bytes(checkpoint, so101_features(CAMERAS), actions_per_chunk))
        self.stub.SendPolicyInstructions(setup, timeout=CALL_TIMEOUT_S, metadata=self.metadata)

    def send(self, payload: bytes) -> None:
        self.stub.SendObservations(iter(send_chunks(payload, pb.Observation)), timeout=CALL_TIMEOUT_S, metadata=self.metadata)

    def actions(self) -> list:
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < deadline:  # an empty reply: no observation was due within obs_queue_timeout
            reply = self.stub.GetActions(pb.Empty(), timeout=CALL_TIMEOUT_S, metadata=self.metadata)
            if reply.data:
                return load_actions(reply.data)
        raise AssertionError("no actions within the deadline")

    def close(self) -> None:
        self.channel.close()


@pytest.fixture(scope="module")
def so101(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("lerobot_serve")
    return so101_params(tmp), so101_observation(np.random.default_rng(5), CAMERAS, TASK)


def _checkpoint(params: Path) -> str:
    return yaml.safe_load(params.read_text())["checkpoint"]


@pytest.mark.parametrize("robots", [1, 2])
def test_robots_get_the_runtimes_chunk_for_their_observation(so101: tuple[Path, dict], tmp_path: Path, robots: int) -> None:
    params, observation = so101
    expected = expected_chunks(params, observation, robots)
    with oxygen_serve(params, "--max-clients", str(robots), "--batch-window-ms", "2000", protocol="lerobot",
                      log_dir=tmp_path) as served:  # fmt: skip
        clients = [Robot(served.port) for _ in range(robots)]
        for client in clients:
            client.start(_checkpoint(params), actions_per_chunk=6)
        for client in clients:
            client.send(observation_bytes(observation, timestep=17, timestamp=500.0))
        with ThreadPoolExecutor(robots) as pool:  # asked together: one engine tick
            chunks = list(pool.map(Robot.actions, clients))
        for client in clients:
            client.close()
    for actions in chunks:
        assert isinstance(actions[0].text, dict) and all(a.text is None for a in actions[1:])  # text beside actions
        assert [a.timestep for a in actions] == list(range(17, 23))
        np.testing.assert_allclose([a.timestamp for a in actions], 500.0 + np.arange(6) / 30.0)
        assert all(a.action.dtype.is_floating_point and a.action.shape == (6,) for a in actions)
    received = [np.stack([a.action.numpy() for a in actions]) for actions in chunks]
    unmatched = list(range(robots))
    for chunk in received:  # each robot got one robot's chunk (which slot a connection takes is the server's)
        match = [i for i in unmatched if np.allclose(chunk, expected[i][:6], rtol=0, atol=1e-4)]
        assert match, f"a chunk equal to none of the runtime's: {chunk[:2]} vs {[e[:2] for e in expected]}"
        unmatched.remove(match[0])
    assert np.ptp(received[0]) > 1e-3


def _status(call) -> grpc.RpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def test_hostile_pickle_and_malformed_streams_are_refused_and_the_server_goes_on(so101: tuple[Path, dict],
                                                                                   tmp_path: Path) -> None:  # fmt: skip
    import os
    import pickle

    params, observation = so101
    marker = tmp_path / "ran"

    class RunsCommand:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {marker}",))

    with oxygen_serve(params, "--max-clients", "2", protocol="lerobot", log_dir=tmp_path) as served:
        robot = Robot(served.port)
        robot.stub.Ready(pb.Empty(), timeout=CALL_TIMEOUT_S)
        error = _status(lambda: robot.stub.SendPolicyInstructions(pb.PolicySetup(data=pickle.dumps(RunsCommand())),
                                                                   timeout=CALL_TIMEOUT_S))  # fmt: skip
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "not one of the allowed globals" in error.details()
        robot.start(_checkpoint(params))
        for payload in (pickle.dumps(RunsCommand()), pickle.dumps({"observation": RunsCommand()})):
            error = _status(lambda: robot.send(payload))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        data = observation_bytes(observation, 0)
        no_end = iter([pb.Observation(transfer_state=pb.TRANSFER_BEGIN, data=data[:100])])
        error = _status(lambda: robot.stub.SendObservations(no_end, timeout=CALL_TIMEOUT_S))
        assert "without a TRANSFER_END" in error.details()
        unknown = iter([pb.Observation(transfer_state=pb.TRANSFER_UNKNOWN, data=data)])
        assert "unknown transfer state" in _status(lambda: robot.stub.SendObservations(unknown, timeout=CALL_TIMEOUT_S)).details()
        wrong = dict(observation, front=np.zeros((60, 80), np.uint8))
        assert "front" in _status(lambda: robot.send(observation_bytes(wrong, 1))).details()
        bad_policy = pb.PolicySetup(data=setup_bytes("someone/act", so101_features(CAMERAS)))
        error = _status(lambda: robot.stub.SendPolicyInstructions(bad_policy, timeout=CALL_TIMEOUT_S))
        assert "this server runs" in error.details()
        robot.send(observation_bytes(observation, 2))  # the same client, still served
        assert len(robot.actions()) == REF_TINY.action_horizon
        robot.close()
        assert served.process.poll() is None
    assert not marker.exists()
    assert "refused pickle" in served.log and "refused stream" in served.log


def test_api_key_and_a_vanished_client_frees_its_slot(so101: tuple[Path, dict], tmp_path: Path) -> None:
    params, observation = so101
    key = (("authorization", "Api-Key s3cret"),)
    with oxygen_serve(params, "--max-clients", "1", "--api-key", "s3cret", "--idle-release-s", "1",
                      protocol="lerobot", log_dir=tmp_path) as served:  # fmt: skip
        stranger = Robot(served.port)
        assert _status(lambda: stranger.stub.Ready(pb.Empty(), timeout=CALL_TIMEOUT_S)).code() == grpc.StatusCode.UNAUTHENTICATED
        first = Robot(served.port, key)
        first.start(_checkpoint(params))
        second = Robot(served.port, key)
        error = _status(lambda: second.stub.Ready(pb.Empty(), timeout=CALL_TIMEOUT_S, metadata=key))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        first.close()  # vanishes without a word: its slot comes back after --idle-release-s
        deadline = time.monotonic() + 60
        while True:
            try:
                second.start(_checkpoint(params))
                break
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() < deadline
                time.sleep(0.2)
        second.send(observation_bytes(observation, 0))
        assert len(second.actions()) == REF_TINY.action_horizon
        second.close()
    assert "silent for 1 s" in served.log


def test_the_fleet_benchmarks_lerobot_clients_are_served(so101: tuple[Path, dict], tmp_path: Path) -> None:
    from oxygen_ros.serve.bench import measure
    from oxygen_ros.serve.lerobot.bench_client import lerobot_client, robot_description

    params, _ = so101
    with oxygen_serve(params, "--max-clients", "2", protocol="lerobot", log_dir=tmp_path) as served:
        rate, p50, p95 = measure(served.port, robot_description(str(params)), 2, 2.0, lerobot_client, start_s=30.0)
    assert rate > 0 and 0 < p50 <= p95
    assert "refused" not in served.log
