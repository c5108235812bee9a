"""LeRobot 0.6.1's wire classes, as its ``async_inference/helpers.py`` declares them, under lerobot's module name.

``lerobot_module()`` puts a module ``lerobot.async_inference.helpers`` holding these dataclasses in
``sys.modules`` for the duration of a ``with`` block, so that ``pickle.dumps`` writes the very pickles a
RobotClient sends (protocol 4, the same module and class names and fields) and ``pickle.loads`` of a reply
builds them, without lerobot installed. Also: the SO-101 features a RobotClient sends
(``hw_to_dataset_features`` of an SO-101 follower with a front and a wrist camera) and the gRPC client calls.
"""

from __future__ import annotations

import pickle
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MODULE = "lerobot.async_inference.helpers"
SO101_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


@dataclass
class RemotePolicyConfig:
    policy_type: str
    pretrained_name_or_path: str
    lerobot_features: dict
    actions_per_chunk: int
    device: str = "cpu"
    rename_map: dict = field(default_factory=dict)


@dataclass
class TimedData:
    timestamp: float
    timestep: int


@dataclass
class TimedAction(TimedData):
    action: Any


@dataclass
class TimedObservation(TimedData):
    observation: dict
    must_go: bool = False


CLASSES = (RemotePolicyConfig, TimedData, TimedAction, TimedObservation)


@contextmanager
def lerobot_module() -> Iterator[types.ModuleType]:
    names = ["lerobot", "lerobot.async_inference", MODULE]
    saved = {name: sys.modules.get(name) for name in names}
    helpers = types.ModuleType(MODULE)
    for cls in CLASSES:
        cls.__module__ = MODULE
        setattr(helpers, cls.__name__, cls)
    sys.modules.update({"lerobot": types.ModuleType("lerobot"),
                        "lerobot.async_inference": types.ModuleType("lerobot.async_inference"), MODULE: helpers})  # fmt: skip
    try:
        yield helpers
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        for cls in CLASSES:
            cls.__module__ = __name__


def so101_features(cameras: dict[str, tuple[int, int]]) -> dict[str, dict]:
    """``map_robot_keys_to_lerobot_features`` of an SO-101 follower with these cameras (height, width)."""
    names = [f"{joint}.pos" for joint in SO101_JOINTS]
    features: dict[str, dict] = {"observation.state": {"dtype": "float32", "shape": (len(names),), "names": names}}
    for name, (h, w) in cameras.items():
        features[f"observation.images.{name}"] = {"dtype": "image", "shape": (h, w, 3),
                                                  "names": ["height", "width", "channels"]}  # fmt: skip
    return features


def so101_observation(rng: np.random.Generator, cameras: dict[str, tuple[int, int]], task: str) -> dict[str, Any]:
    """A raw SO-101 observation as the robot returns it (floats per motor, HWC uint8 per camera) plus the task."""
    obs: dict[str, Any] = {f"{joint}.pos": float(rng.uniform(-40, 40)) for joint in SO101_JOINTS}
    obs["gripper.pos"] = float(rng.uniform(5, 60))
    for name, (h, w) in cameras.items():
        obs[name] = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    obs["task"] = task
    return obs


def setup_bytes(checkpoint: str, features: dict, actions_per_chunk: int = 50, **kw: Any) -> bytes:
    with lerobot_module():
        return pickle.dumps(RemotePolicyConfig("pi05", checkpoint, features, actions_per_chunk, **kw), protocol=4)


def observation_bytes(observation: dict, timestep: int, must_go: bool = True, timestamp: float = 1000.0) -> bytes:
    with lerobot_module():
        return pickle.dumps(TimedObservation(timestamp, timestep, observation, must_go), protocol=4)


def load_actions(data: bytes) -> list[TimedAction]:
    with lerobot_module():
        return pickle.loads(data)
