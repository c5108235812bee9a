"""Which observation keys each openpi robot client sends, and how they fill the model's image slots and state.

The keys are those of openpi's clients and input transforms (``examples/{aloha_real,aloha_sim,droid,libero}``,
``src/openpi/policies/{aloha,droid,libero}_policy.py``); the slots are openpi's pi0.5 order (base, left
wrist, right wrist). A layout reads a decoded request and returns the images in slot order, the state and the
prompt, or raises :class:`ObservationError` naming the key and what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["LAYOUTS", "Layout", "Observation", "ObservationError", "camera_image", "layout_for", "prompt_of"]

MAX_IMAGE_SIDE = 2048  # larger than any robot camera a π0.5 client resizes from; a bigger one is refused
MAX_PROMPT_CHARS = 2000
MAX_QUESTION_CHARS = 500
ALOHA_CAMERAS = ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")
ALOHA_SLOTS = {"cam_high": 0, "cam_left_wrist": 1, "cam_right_wrist": 2}  # cam_low: accepted, not used (as openpi)
# The pose the committed ALOHA policy starts from (the MuJoCo ALOHA's reset pose, per arm: waist, shoulder,
# elbow, forearm roll, wrist angle, wrist rotate); openpi's real-ALOHA client moves there on reset.
ALOHA_RESET_POSE = [0.0, -0.96, 1.16, 0.0, -0.3, 0.0]


class ObservationError(ValueError):
    """A request whose keys, shapes, dtypes or values do not fit the served robot's layout."""


@dataclass
class Observation:
    images: list[np.ndarray | None]  # HWC uint8 per image slot (None: no camera)
    state: np.ndarray | None
    prompt: str
    ask: str | None = None  # a question for the robot's text (answered in a later reply)


@dataclass(frozen=True)
class Layout:
    name: str
    read: Callable[[Mapping[str, Any]], tuple[list[np.ndarray | None], np.ndarray | None]]
    metadata: dict[str, Any] = field(default_factory=dict)
    keys: tuple[str, ...] = ()  # the keys the client sends (for messages and docs)

    def observation(self, obs: Mapping[str, Any], default_prompt: str | None) -> Observation:
        images, state = self.read(obs)
        return Observation(images, state, prompt_of(obs, default_prompt), _question(obs))


def camera_image(value: Any, key: str, chw: bool) -> np.ndarray:
    """A camera image → HWC uint8 (openpi converts float images in [0, 1] the same way)."""
    if not isinstance(value, np.ndarray):
        raise ObservationError(f"{key}: expected an image array, got {type(value).__name__}")
    order = "CHW" if chw else "HWC"
    channel_axis = 0 if chw else -1
    if value.ndim != 3 or value.shape[channel_axis] != 3:
        raise ObservationError(f"{key}: expected a {order} image with 3 channels, got shape {list(value.shape)}")
    image = np.moveaxis(value, 0, -1) if chw else value
    h, w = image.shape[:2]
    if not 0 < h <= MAX_IMAGE_SIDE or not 0 < w <= MAX_IMAGE_SIDE:
        raise ObservationError(f"{key}: image of {h}x{w} pixels; each side must be 1..{MAX_IMAGE_SIDE}")
    if value.dtype == np.uint8:
        return np.ascontiguousarray(image)
    if value.dtype.kind == "f":
        if not np.all(np.isfinite(image)):
            raise ObservationError(f"{key}: image holds NaN or infinite values")
        return np.ascontiguousarray((255 * np.clip(image, 0.0, 1.0)).astype(np.uint8))
    raise ObservationError(f"{key}: image dtype must be uint8 (or float in [0, 1]), got {value.dtype}")


def _vector(obs: Mapping[str, Any], key: str, size: int) -> np.ndarray:
    if key not in obs:
        raise ObservationError(f"missing key {key!r} ({size} values)")
    value = obs[key]
    if isinstance(value, (np.generic, int, float)) and size == 1:
        value = np.asarray([value])
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        raise ObservationError(f"{key}: expected a numeric array of {size} values, got {type(value).__name__}")
    if value.size != size or value.ndim > 1:
        raise ObservationError(f"{key}: expected {size} values, got shape {list(value.shape)}")
    state = value.astype(np.float64).reshape(size)
    if not np.all(np.isfinite(state)):
        raise ObservationError(f"{key}: holds NaN or infinite values")
    return state


def _required_image(obs: Mapping[str, Any], key: str) -> np.ndarray:
    if key not in obs:
        raise ObservationError(f"missing key {key!r} (an HWC uint8 image)")
    return camera_image(obs[key], key, chw=False)


def prompt_of(obs: Mapping[str, Any], default: str | None) -> str:
    value = obs.get("prompt", default)
    if value is None:
        raise ObservationError("missing key 'prompt', and the server has no --default-prompt")
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str) or not value.strip():
        raise ObservationError(f"prompt must be a non-empty string, got {value!r}"[:200])
    if len(value) > MAX_PROMPT_CHARS:
        raise ObservationError(f"prompt has {len(value)} characters; at most {MAX_PROMPT_CHARS}")
    return value


def _question(obs: Mapping[str, Any]) -> str | None:
    value = obs.get("ask")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_QUESTION_CHARS:
        raise ObservationError(f"ask must be a non-empty string of at most {MAX_QUESTION_CHARS} characters")
    return value


def _aloha(obs: Mapping[str, Any]) -> tuple[list[np.ndarray | None], np.ndarray | None]:
    images = obs.get("images")
    if not isinstance(images, Mapping):
        raise ObservationError("missing key 'images': a map of camera name → CHW uint8 image")
    unknown = sorted(str(k) for k in images if k not in ALOHA_CAMERAS)
    if unknown:
        raise ObservationError(f"images: unknown cameras {unknown}; ALOHA cameras are {list(ALOHA_CAMERAS)}")
    if "cam_high" not in images:
        raise ObservationError("images: cam_high is required (the base camera)")
    slots: list[np.ndarray | None] = [None, None, None]
    for name, image in images.items():
        converted = camera_image(image, f"images.{name}", chw=True)
        if name in ALOHA_SLOTS:
            slots[ALOHA_SLOTS[name]] = converted
    return slots, _vector(obs, "state", 14)


def _droid(obs: Mapping[str, Any]) -> tuple[list[np.ndarray | None], np.ndarray | None]:
    base = _required_image(obs, "observation/exterior_image_1_left")
    wrist = _required_image(obs, "observation/wrist_image_left")
    joints = _vector(obs, "observation/joint_position", 7)
    gripper = _vector(obs, "observation/gripper_position", 1)
    return [base, wrist, None], np.concatenate([joints, gripper])


def _libero(obs: Mapping[str, Any]) -> tuple[list[np.ndarray | None], np.ndarray | None]:
    base = _required_image(obs, "observation/image")
    wrist = _required_image(obs, "observation/wrist_image")
    return [base, wrist, None], _vector(obs, "observation/state", 8)


LAYOUTS: dict[str, Layout] = {
    "aloha": Layout("aloha", _aloha, {"reset_pose": ALOHA_RESET_POSE}, ("state", "images")),
    "droid": Layout("droid", _droid, {}, ("observation/exterior_image_1_left", "observation/wrist_image_left",
                                                "observation/joint_position", "observation/gripper_position", "prompt")),
    "libero": Layout("libero", _libero, {}, ("observation/image", "observation/wrist_image", "observation/state",
                                                   "prompt")),
}  # fmt: skip


def layout_for(embodiment: str, override: str | None = None) -> Layout:
    """The layout named ``override``, else the one of the runtime's embodiment (droid, aloha, libero)."""
    name = override or embodiment
    if name not in LAYOUTS:
        raise ValueError(f"no openpi observation layout for embodiment {embodiment!r}: set embodiment to one of "
                         f"{sorted(LAYOUTS)} in the parameters file, or pass --layout")
    return LAYOUTS[name]
