"""A RobotClient's policy instructions mapped onto the loaded checkpoint and the served embodiment.

The client names a policy (``policy_type``, ``pretrained_name_or_path``) and describes its robot with
``lerobot_features`` (``map_robot_keys_to_lerobot_features``: ``observation.state`` with the motor names in
order, ``observation.images.<camera>`` with an HWC shape); ``rename_map`` renames those features to the
policy's (lerobot's rename processor). The binding says which raw observation key fills the state vector and
each image slot of the checkpoint; a request that does not fit is refused with :class:`SetupRefused` saying
what the server serves instead. The raw observation then becomes this package's :class:`Observation`, as
lerobot's server builds its frame (state values in the features' order, as float32).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..layouts import Observation, ObservationError, camera_image, prompt_of
from .pickles import PolicySetup, TimedObservation

STATE = "observation.state"
IMAGES = "observation.images."
POLICY_TYPES = ("pi05",)  # the π0.5 family this engine runs (lerobot's PI05Policy checkpoints)
MAX_NAME_CHARS = 1000


class SetupRefused(ValueError):
    """Policy instructions this server cannot serve (the message says what it serves)."""


@dataclass(frozen=True)
class ServedPolicy:
    """What the server runs: the checkpoint, its image slots, the robot's state names (``<joint>.pos``)."""

    checkpoint: str
    image_slots: tuple[str, ...]  # the checkpoint's image feature names, in slot order
    state_names: tuple[str, ...]  # () = any state of state_dim values
    state_dim: int | None
    chunk_length: int
    aliases: tuple[str, ...] = ()  # other names a client may give as pretrained_name_or_path (a hub id)

    def names(self) -> list[str]:
        path = Path(self.checkpoint)
        return [self.checkpoint, str(path.resolve()), path.name, *self.aliases]


@dataclass(frozen=True)
class RobotBinding:
    state_keys: tuple[str, ...]  # raw observation keys, in the state vector's order
    image_keys: tuple[str | None, ...]  # the raw observation key of each image slot (None: no camera)
    actions_per_chunk: int

    def observation(self, timed: TimedObservation, default_prompt: str | None) -> Observation:
        """A raw robot observation → the frame's images (slot order), state and prompt."""
        raw = timed.observation
        values = []
        for key in self.state_keys:
            value = raw.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise ObservationError(f"{key}: expected a finite number, got {str(value)[:40]!r}")
            values.append(value)
        state = np.asarray(values, dtype=np.float32).astype(np.float64) if values else None
        images: list[np.ndarray | None] = []
        for key in self.image_keys:
            if key is None:
                images.append(None)
            elif key not in raw:
                raise ObservationError(f"missing camera {key!r}")
            else:
                images.append(camera_image(raw[key], key, chw=False))
        task = raw.get("task")
        return Observation(images, state, prompt_of({"prompt": task or None}, default_prompt))


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise SetupRefused(f"{what} must be a non-empty string of at most {MAX_NAME_CHARS} characters")
    return value


def _shape(feature: Any, key: str) -> tuple[int, ...]:
    shape = feature.get("shape") if isinstance(feature, Mapping) else None
    if not isinstance(shape, Sequence) or not all(isinstance(n, int) and n > 0 for n in shape):
        raise SetupRefused(f"lerobot_features[{key!r}] has no shape (positive integers)")
    return tuple(shape)


def _state_keys(features: Mapping[str, Any], served: ServedPolicy) -> tuple[str, ...]:
    if STATE not in features:
        if served.state_dim:
            raise SetupRefused(f"lerobot_features has no {STATE!r}; the checkpoint needs {served.state_dim} state values")
        return ()
    feature = features[STATE]
    names = feature.get("names") if isinstance(feature, Mapping) else None
    if not isinstance(names, Sequence) or not all(isinstance(n, str) for n in names):
        raise SetupRefused(f"lerobot_features[{STATE!r}] has no names (the motor keys, in order)")
    if _shape(feature, STATE) != (len(names),):
        raise SetupRefused(f"lerobot_features[{STATE!r}]: shape {list(feature['shape'])} for {len(names)} names")
    if served.state_names and tuple(names) != served.state_names:
        raise SetupRefused(f"the robot's state is {list(names)}; this server's embodiment is {list(served.state_names)}")
    if served.state_dim is not None and len(names) != served.state_dim:
        raise SetupRefused(f"the robot sends {len(names)} state values; the checkpoint takes {served.state_dim}")
    return tuple(names)


def _image_keys(features: Mapping[str, Any], rename: Mapping[str, str], served: ServedPolicy) -> tuple[str | None, ...]:
    keys: list[str | None] = [None] * len(served.image_slots)
    unknown = []
    for key, feature in features.items():
        if not key.startswith(IMAGES):
            continue
        shape = _shape(feature, key)
        if len(shape) != 3 or shape[2] != 3:
            raise SetupRefused(f"lerobot_features[{key!r}]: shape {list(shape)}, expected (height, width, 3)")
        policy_key = rename.get(key, key)
        names = (policy_key, policy_key.removeprefix(IMAGES))  # an openpi checkpoint's slots have no prefix
        slot = next((i for i, name in enumerate(served.image_slots) if name in names), None)
        if slot is None:
            unknown.append(policy_key)
            continue
        if keys[slot] is not None:
            raise SetupRefused(f"two cameras feed {policy_key!r}")
        keys[slot] = key.removeprefix(IMAGES)  # the robot's raw observation names the camera without the prefix
    if unknown:
        raise SetupRefused(f"cameras {unknown} are not image features of the checkpoint {list(served.image_slots)} "
                           "(rename_map maps the robot's to the policy's)")  # fmt: skip
    if all(key is None for key in keys):
        raise SetupRefused(f"no camera feeds the checkpoint's image features {list(served.image_slots)}")
    return tuple(keys)


def bind(setup: PolicySetup, served: ServedPolicy) -> RobotBinding:
    """The binding of a client's policy instructions, or :class:`SetupRefused` saying why not."""
    fields = vars(setup)
    policy_type = _text(fields.get("policy_type"), "policy_type")
    if policy_type not in POLICY_TYPES:
        raise SetupRefused(f"policy_type {policy_type!r}: this server runs a {' / '.join(POLICY_TYPES)} checkpoint")
    name = _text(fields.get("pretrained_name_or_path"), "pretrained_name_or_path")
    if name not in served.names():
        raise SetupRefused(f"pretrained_name_or_path {name!r}: this server runs {served.checkpoint!r}"
                           + (f" (also named {list(served.aliases)})" if served.aliases else ""))  # fmt: skip
    chunk = fields.get("actions_per_chunk")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise SetupRefused(f"actions_per_chunk must be a positive integer, got {str(chunk)[:20]!r}")
    features = fields.get("lerobot_features")
    if not isinstance(features, Mapping) or not all(isinstance(k, str) for k in features):
        raise SetupRefused("lerobot_features must be a map of feature names")
    rename = fields.get("rename_map") or {}
    if not isinstance(rename, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in rename.items()):
        raise SetupRefused("rename_map must map feature names to feature names")
    return RobotBinding(_state_keys(features, served), _image_keys(features, rename, served),
                        min(chunk, served.chunk_length))  # fmt: skip
