"""LeRobot's wire pieces without a model: the restricted unpickler, the reply pickles, the chunked transfer and
the mapping of a RobotClient's policy instructions onto the served checkpoint."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from lerobot_shapes import TimedAction, load_actions, observation_bytes, setup_bytes, so101_features, so101_observation
from oxygen_ros.serve.layouts import ObservationError
from oxygen_ros.serve.lerobot import services_pb2 as pb
from oxygen_ros.serve.lerobot.binding import ServedPolicy, SetupRefused, bind
from oxygen_ros.serve.lerobot.pickles import (PickleRefused, PolicySetup, TimedAction as OutAction, TimedObservation,
                                              dumps_lerobot, load_as, restricted_loads)  # fmt: skip
from oxygen_ros.serve.lerobot.transfer import CHUNK_BYTES, TransferError, receive_chunks, send_chunks

CAMERAS = {"front": (48, 64), "wrist": (32, 40)}
SERVED = ServedPolicy("/models/pi05_so101", ("observation.images.front", "observation.images.wrist"),
                      tuple(f"{j}.pos" for j in ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex",
                                                  "wrist_roll", "gripper")), 6, 50, ("user/pi05_so101",))  # fmt: skip


class RunsCommand:
    """A pickle whose reduce would run a shell command (the attack an unrestricted pickle.loads allows)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_lerobot_observation_pickle_loads_to_the_stand_in() -> None:
    obs = so101_observation(np.random.default_rng(0), CAMERAS, "pick the cube")
    timed = load_as(observation_bytes(obs, 7, must_go=True), TimedObservation, 1 << 20)
    assert (timed.timestep, timed.timestamp, timed.must_go) == (7, 1000.0, True)
    np.testing.assert_array_equal(timed.observation["front"], obs["front"])
    assert timed.observation["front"].dtype == np.uint8 and timed.observation["task"] == "pick the cube"


def test_a_pickle_that_would_run_a_command_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for payload in (pickle.dumps(RunsCommand(marker)), pickle.dumps([1, RunsCommand(marker)]),
                    pickle.dumps({"observation": RunsCommand(marker)}, protocol=0)):  # fmt: skip
        with pytest.raises(PickleRefused, match="posix.system|os.system|not one of the allowed"):
            restricted_loads(payload, 1 << 20)
    assert not marker.exists()


@pytest.mark.parametrize("value", [np.array([object()], dtype=object), np.zeros(2, dtype=[("a", "f4")]),
                                   np.array(["text"])])  # fmt: skip
def test_non_numeric_arrays_are_refused(value: np.ndarray) -> None:
    with pytest.raises(PickleRefused):
        restricted_loads(observation_bytes({"x": value}, 0), 1 << 20)


def test_size_cap_is_checked_before_unpickling_and_garbage_is_refused() -> None:
    data = observation_bytes({"x": np.zeros(1000)}, 0)
    with pytest.raises(PickleRefused, match="at most 100"):
        restricted_loads(data, 100)
    with pytest.raises(PickleRefused, match="not a readable pickle"):
        restricted_loads(data[: len(data) // 2], 1 << 20)
    with pytest.raises(PickleRefused, match="expected a pickled PolicySetup"):
        load_as(data, PolicySetup, 1 << 20)


def test_replies_load_as_lerobots_timed_actions() -> None:
    chunk = torch.arange(12, dtype=torch.float32).reshape(2, 6)
    data = dumps_lerobot([OutAction(5.0, 3, chunk[0]), OutAction(5.1, 4, chunk[1])])
    assert b"lerobot.async_inference.helpers" in data and b"oxygen_ros" not in data
    actions = load_actions(data)
    assert all(type(a) is TimedAction for a in actions)
    assert [(a.timestamp, a.timestep) for a in actions] == [(5.0, 3), (5.1, 4)]
    torch.testing.assert_close(torch.stack([a.action for a in actions]), chunk)


def test_chunked_transfer_round_trip_and_malformed_streams() -> None:
    payload = os.urandom(2 * CHUNK_BYTES + 10)
    messages = send_chunks(payload, pb.Observation)
    assert [m.transfer_state for m in messages] == [pb.TRANSFER_BEGIN, pb.TRANSFER_MIDDLE, pb.TRANSFER_END]
    assert receive_chunks(iter(messages), len(payload)) == payload
    assert [m.transfer_state for m in send_chunks(b"small", pb.Observation)] == [pb.TRANSFER_END]
    with pytest.raises(TransferError, match="without a TRANSFER_END"):
        receive_chunks(iter(messages[:2]), len(payload))
    with pytest.raises(TransferError, match="unknown transfer state 0"):
        receive_chunks(iter([pb.Observation(transfer_state=pb.TRANSFER_UNKNOWN, data=b"x")]), 100)
    with pytest.raises(TransferError, match="exceeds"):
        receive_chunks(iter(messages), len(payload) - 1)


def _setup(**kw: object) -> PolicySetup:
    args = {"checkpoint": "user/pi05_so101", "features": so101_features(CAMERAS), **kw}
    return load_as(setup_bytes(**args), PolicySetup, 1 << 20)  # type: ignore[arg-type]


def test_so101_instructions_bind_state_and_cameras() -> None:
    binding = bind(_setup(actions_per_chunk=80), SERVED)
    assert binding.state_keys == SERVED.state_names and binding.image_keys == ("front", "wrist")
    assert binding.actions_per_chunk == 50  # the chunk's length at most
    raw = so101_observation(np.random.default_rng(1), CAMERAS, "stack")
    obs = binding.observation(load_as(observation_bytes(raw, 0), TimedObservation, 1 << 22), None)
    assert obs.prompt == "stack" and obs.images[1].shape == (32, 40, 3)
    np.testing.assert_array_equal(obs.state, np.float32([raw[k] for k in SERVED.state_names]))
    del raw["wrist"]
    with pytest.raises(ObservationError, match="missing camera 'wrist'"):
        binding.observation(load_as(observation_bytes(raw, 0), TimedObservation, 1 << 22), None)


def test_rename_map_maps_the_robots_cameras_onto_the_checkpoints() -> None:
    features = so101_features({"top": (48, 64), "hand": (48, 64)})
    rename = {"observation.images.top": "observation.images.front", "observation.images.hand": "observation.images.wrist"}
    assert bind(_setup(features=features, rename_map=rename), SERVED).image_keys == ("top", "hand")
    with pytest.raises(SetupRefused, match=r"cameras \['observation.images.top'"):
        bind(_setup(features=features), SERVED)


@pytest.mark.parametrize("kw, why", [
    ({"checkpoint": "someone/act_koch"}, "this server runs '/models/pi05_so101'"),
    ({"features": {"observation.state": {"shape": (7,), "names": [f"m{i}.pos" for i in range(7)]}}},
     "this server's embodiment is"),
    ({"actions_per_chunk": 0}, "actions_per_chunk must be a positive integer"),
])  # fmt: skip
def test_instructions_this_server_cannot_serve_are_refused_saying_why(kw: dict, why: str) -> None:
    with pytest.raises(SetupRefused, match=why):
        bind(_setup(**kw), SERVED)
    setup = _setup()
    setup.policy_type = "act"
    with pytest.raises(SetupRefused, match="policy_type 'act'"):
        bind(setup, SERVED)


def test_this_packages_setups_and_observations_pickle_as_lerobots() -> None:
    from lerobot_shapes import RemotePolicyConfig, TimedObservation as LerobotObservation, lerobot_module
    from oxygen_ros.serve.lerobot.pickles import make

    setup = make(PolicySetup, policy_type="pi05", pretrained_name_or_path="m", lerobot_features={}, actions_per_chunk=5,
                 device="cpu", rename_map={})  # fmt: skip
    obs = make(TimedObservation, timestamp=1.5, timestep=4, observation={"front": np.ones((2, 2, 3), np.uint8)}, must_go=True)
    with lerobot_module():
        loaded_setup, loaded_obs = pickle.loads(dumps_lerobot(setup)), pickle.loads(dumps_lerobot(obs))
    assert loaded_setup == RemotePolicyConfig("pi05", "m", {}, 5)
    assert type(loaded_obs) is LerobotObservation and (loaded_obs.timestep, loaded_obs.must_go) == (4, True)
