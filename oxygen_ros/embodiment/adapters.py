"""The embodiment adapters: ``none``, ``droid``, ``aloha``, ``libero`` and ``scale_offset``.

Each says which state and action sizes it takes (``state_dim`` / ``action_dim``; None: any) so a config
that gives it another size is refused at start with the reason, and turns robot state into the model's space
(``state_in``, before normalization) and the model's actions into the robot's commands (``actions_out``,
after unnormalization and relative actions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import aloha

Transform = Callable[[np.ndarray], np.ndarray]


class AdapterError(ValueError):
    """An adapter's options or the sizes it is given do not fit; the message says which."""


def _same(x: np.ndarray) -> np.ndarray:
    return x


@dataclass(frozen=True)
class Adapter:
    name: str
    state_dim: int | None  # the state it converts (None: any)
    action_dim: int | None  # the actions it sends, the leading dims of the model's (None: all of them)
    state_fn: Transform = _same
    action_fn: Transform = _same
    notes: tuple[str, ...] = field(default_factory=tuple)
    # the inverse of action_fn: a robot's command → the model's space (training data); None: not invertible here
    action_in_fn: Transform | None = _same

    def state_in(self, state: np.ndarray) -> np.ndarray:
        x = np.asarray(state, dtype=np.float64)
        if self.state_dim is not None and x.shape[-1] != self.state_dim:
            raise AdapterError(f"embodiment {self.name} takes a state of {self.state_dim} values, got {x.shape[-1]}")
        return self.state_fn(x.copy())

    def actions_out(self, actions: np.ndarray) -> np.ndarray:
        a = np.asarray(actions, dtype=np.float64)
        if self.action_dim is not None:
            if a.shape[-1] < self.action_dim:
                raise AdapterError(f"embodiment {self.name} sends {self.action_dim} action dims; the model gives {a.shape[-1]}")
            a = a[..., : self.action_dim]
        return self.action_fn(a.copy())

    def actions_in(self, actions: np.ndarray) -> np.ndarray:
        """Robot-side actions (what ``actions_out`` gives) → the model's space, for training targets."""
        if self.action_in_fn is None:
            raise AdapterError(f"embodiment {self.name} has no inverse of its action transform")
        a = np.asarray(actions, dtype=np.float64)
        if self.action_dim is not None and a.shape[-1] != self.action_dim:
            raise AdapterError(f"embodiment {self.name} takes {self.action_dim} action dims, got {a.shape[-1]}")
        return self.action_in_fn(a.copy())

    def describe(self) -> str:
        sizes = f"state {self.state_dim or 'any'}, actions {self.action_dim or 'all'}"
        return f"embodiment {self.name} ({sizes}{''.join('; ' + n for n in self.notes)})"


# ---------------------------------------------------------------------------------------------- DROID
def _droid(options: Mapping[str, Any]) -> Adapter:
    """openpi DROID: state = 7 joint positions + gripper position; actions = 7 joint velocities + gripper
    position (``DroidOutputs`` keeps 8). The client (``examples/droid/main.py``) then binarizes the gripper at
    0.5 and clips every dimension to [-1, 1] before stepping the robot in joint-velocity mode."""
    threshold = _opt_float(options, "gripper_threshold", 0.5)
    clip = bool(options.get("clip", True))

    def actions(a: np.ndarray) -> np.ndarray:
        if threshold is not None:
            a[..., 7] = np.where(a[..., 7] > threshold, 1.0, 0.0)
        return np.clip(a, -1.0, 1.0) if clip else a

    notes = ("7 joint velocities + gripper position", f"gripper binarized at {threshold}" if threshold is not None else "gripper as is")
    return Adapter("droid", 8, 8, _same, actions, notes + (("clipped to [-1, 1]",) if clip else ()), None)


# ---------------------------------------------------------------------------------------------- ALOHA
def _aloha(options: Mapping[str, Any]) -> Adapter:
    """openpi ALOHA (``AlohaInputs`` / ``AlohaOutputs``): 14 dims; with ``adapt_to_pi`` (openpi's default)
    the joint flip mask and the gripper conversions, else the state and first 14 action dims unchanged."""
    if bool(options.get("adapt_to_pi", True)):
        return Adapter("aloha", aloha.DIM, aloha.DIM, aloha.state_in, aloha.actions_out,
                       ("adapt_to_pi: joints flipped [1, -1, -1, 1, 1, 1, 1] per arm, grippers converted",), aloha.actions_in)  # fmt: skip
    return Adapter("aloha", aloha.DIM, aloha.DIM, notes=("adapt_to_pi off",))


# --------------------------------------------------------------------------------------------- LIBERO
def _libero(options: Mapping[str, Any]) -> Adapter:
    """openpi LIBERO: state = end-effector position (3), axis-angle (3), gripper joint positions (2);
    actions = end-effector delta position (3) and rotation (3, axis-angle) + gripper (``LiberoOutputs`` keeps 7)."""
    return Adapter("libero", 8, 7, notes=("end-effector delta xyz + axis-angle + gripper",))


# ----------------------------------------------------------------------------------------------- units
def _scale_offset(options: Mapping[str, Any]) -> Adapter:
    """Per-dimension units: ``model = robot · scale + offset`` on the state, and its inverse on the actions
    (``robot = (model - offset) / scale``), e.g. radians on the robot, degrees in the dataset."""
    scale = _vector(options, "scale")
    offset = _vector(options, "offset", default=np.zeros_like(scale) if scale is not None else None)
    if scale is None or offset is None:
        raise AdapterError("embodiment scale_offset needs 'scale' (and optionally 'offset'): one number per dimension")
    if scale.shape != offset.shape:
        raise AdapterError(f"scale_offset: scale has {scale.size} values and offset {offset.size}")
    if np.any(scale == 0):
        raise AdapterError(f"scale_offset: scale is 0 at dims {np.flatnonzero(scale == 0).tolist()}")
    n = scale.size
    return Adapter("scale_offset", n, n, lambda s: s * scale + offset, lambda a: (a - offset) / scale,
                   (f"scale {scale.tolist()}, offset {offset.tolist()}",), lambda a: a * scale + offset)  # fmt: skip


def _none(options: Mapping[str, Any]) -> Adapter:
    return Adapter("none", None, None)


ADAPTERS: dict[str, Callable[[Mapping[str, Any]], Adapter]] = {
    "none": _none, "droid": _droid, "aloha": _aloha, "libero": _libero, "scale_offset": _scale_offset,
}  # fmt: skip
OPTIONS = {"droid": {"gripper_threshold", "clip"}, "aloha": {"adapt_to_pi"}, "libero": set(),
           "scale_offset": {"scale", "offset"}, "none": set()}  # fmt: skip
# openpi asset ids (``assets/<asset_id>/norm_stats.json``) whose robot-side transforms are known.
ASSET_EMBODIMENTS = {"droid": "droid", "trossen": "aloha", "aloha": "aloha", "libero": "libero"}


def make_adapter(name: str, options: Mapping[str, Any] | None = None) -> Adapter:
    """The adapter called ``name`` with its options; unknown names or options raise :class:`AdapterError`."""
    options = dict(options or {})
    if name not in ADAPTERS:
        raise AdapterError(f"unknown embodiment {name!r}; choose one of {sorted(ADAPTERS)} (or auto)")
    extra = sorted(set(options) - OPTIONS[name])
    if extra:
        raise AdapterError(f"embodiment {name} has no options {extra}; it takes {sorted(OPTIONS[name]) or 'none'}")
    return ADAPTERS[name](options)


def adapter_for_asset(asset_path: str | None) -> str | None:
    """The embodiment a checkpoint's openpi asset id names (``.../assets/trossen/norm_stats.json`` → aloha)."""
    if not asset_path:
        return None
    parts = asset_path.replace("\\", "/").split("/")
    if "assets" not in parts:
        return None
    for part in reversed(parts[parts.index("assets") + 1 : -1]):
        for key, name in ASSET_EMBODIMENTS.items():
            if key in part.lower():
                return name
    return None


def _opt_float(options: Mapping[str, Any], key: str, default: float | None) -> float | None:
    value = options.get(key, default)
    if value is None or (isinstance(value, str) and value.lower() in ("", "none", "off")):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AdapterError(f"{key} must be a number (or none), got {value!r}")
    return float(value)


def _vector(options: Mapping[str, Any], key: str, default: np.ndarray | None = None) -> np.ndarray | None:
    value = options.get(key)
    if value is None:
        return default
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise AdapterError(f"{key} must be a non-empty list of numbers, got {value!r}")
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 1 or not np.all(np.isfinite(arr)):
        raise AdapterError(f"{key} must be a list of finite numbers, got {value!r}")
    return arr
