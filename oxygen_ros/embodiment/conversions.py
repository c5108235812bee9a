"""Unit conversions between the model's values and the robot's, written in a config, one per dimension.

A conversion names the relation between a model-side value (what the adapter sends or takes) and a robot-side
value (what the controller takes or the joint state reports). The same text means the same relation on both
sides: an output converts model → robot, a joint state robot → model.

Text, one entry per dimension, entries separated by ``;``::

    identity                         robot = model
    linear(3.0, 0.0)                 robot = 3.0 · model + 0.0        (model = (robot - 0.0) / 3.0)
    aloha_gripper_joint              a named converter (below)
    lerobot_degrees(1000, 3000, 2048)  a named converter with its arguments
    linear(3.0, 0.0) clip(-1, 1)     the model-side value bounded to [-1, 1] (before an output converts it,
                                     after a joint state is converted)
    6x identity                      six dimensions with the same conversion

Named converters (``CONVERTERS``): ``piecewise(x0, y0, x1, y1, ...)``, a measured curve (``piecewise.py``);
``aloha_gripper_joint``, ``aloha_gripper_position`` (``aloha.py``);
``lerobot_degrees``, ``lerobot_range_m100_100``, ``lerobot_range_0_100`` (``units.py``); ``robotiq_knuckle``
(``robotiq.py``).

API: :func:`parse_conversions` (text → :class:`Conversions`, or :class:`ConversionError` with one line that
starts with the config key), :meth:`Conversions.to_robot` and :meth:`Conversions.to_model` on ``[..., n]``
arrays. No ROS here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from . import aloha, robotiq, units
from .piecewise import piecewise_converter

PLACEHOLDER = "FILL_IN"
Fn = units.Fn


class ConversionError(ValueError):
    """A conversion text is wrong; the message is one line that names the config key."""


@dataclass(frozen=True)
class Converter:
    """A named relation: ``make(args)`` → (model → robot, robot → model)."""

    args: tuple[str, ...]
    make: Callable[[Sequence[float]], tuple[Fn, Fn]]
    doc: str
    variadic: bool = False  # any number of arguments (``make`` checks them)


def _identity(args: Sequence[float]) -> tuple[Fn, Fn]:
    return (lambda x: x), (lambda x: x)


def _linear(args: Sequence[float]) -> tuple[Fn, Fn]:
    scale, offset = args
    if scale == 0:
        raise ValueError("linear scale must not be 0")
    return (lambda x: x * scale + offset), (lambda x: (x - offset) / scale)


CONVERTERS: dict[str, Converter] = {
    "identity": Converter((), _identity, "robot = model"),
    "linear": Converter(("scale", "offset"), _linear, "robot = scale · model + offset"),
    "piecewise": Converter(("x0", "y0", "x1", "y1", "..."), piecewise_converter,
                           "straight lines through the points (model x, robot y), both increasing", variadic=True),
    "aloha_gripper_joint": Converter((), aloha.gripper_joint_converter,
                                     "ALOHA normalized gripper (0 closed, 1 open) ↔ puppet gripper joint (rad)"),
    "aloha_gripper_position": Converter((), aloha.gripper_position_converter,
                                        "ALOHA normalized gripper ↔ puppet finger position (m)"),
    "robotiq_knuckle": Converter(("closed_angle",), robotiq.knuckle_converter,
                                 "gripper position (0 open, 1 closed) ↔ ros2_robotiq_gripper knuckle angle (rad)"),
    "lerobot_degrees": Converter(("range_min", "range_max", "zero_tick"), units.lerobot_degrees_converter,
                                 "LeRobot DEGREES value ↔ driver radians (tick - zero_tick) · 2π / 4096"),
    "lerobot_range_m100_100": Converter(("range_min", "range_max", "drive_mode", "zero_tick"),
                                        units.lerobot_range_converter(-100.0), "LeRobot RANGE_M100_100 ↔ driver radians"),
    "lerobot_range_0_100": Converter(("range_min", "range_max", "drive_mode", "zero_tick"),
                                     units.lerobot_range_converter(0.0), "LeRobot RANGE_0_100 ↔ driver radians"),
}  # fmt: skip


@dataclass(frozen=True)
class DimConversion:
    text: str
    model_to_robot: Fn
    robot_to_model: Fn
    low: float = -math.inf
    high: float = math.inf

    @property
    def relation(self) -> str:
        """The conversion without its clip, e.g. 'linear(3.0, 0.0)'."""
        return re.split(r"\s+clip\s*\(", self.text)[0]

    def _clip(self, x: np.ndarray) -> np.ndarray:
        return np.clip(x, self.low, self.high) if (self.low, self.high) != (-math.inf, math.inf) else x


@dataclass(frozen=True)
class Conversions:
    """One conversion per dimension of an output or of the joint state."""

    dims: tuple[DimConversion, ...]

    def __len__(self) -> int:
        return len(self.dims)

    def to_robot(self, values: np.ndarray) -> np.ndarray:
        """Model values ``[..., n]`` → the robot's (each bounded by its clip first)."""
        x = self._checked(values)
        return np.stack([d.model_to_robot(d._clip(x[..., i])) for i, d in enumerate(self.dims)], axis=-1)

    def to_model(self, values: np.ndarray) -> np.ndarray:
        """Robot values ``[..., n]`` → the model's (each bounded by its clip after)."""
        x = self._checked(values)
        return np.stack([d._clip(d.robot_to_model(x[..., i])) for i, d in enumerate(self.dims)], axis=-1)

    def describe(self) -> str:
        return "; ".join(d.text for d in self.dims)

    def _checked(self, values: np.ndarray) -> np.ndarray:
        x = np.asarray(values, dtype=np.float64)
        if x.shape[-1] != len(self.dims):
            raise ConversionError(f"{len(self.dims)} conversions for values of {x.shape[-1]} dims")
        return x


_ENTRY = re.compile(r"^(?:(\d+)\s*x\s+)?([A-Za-z_]\w*)\s*(?:\(([^()]*)\))?\s*(?:clip\s*\(([^()]*)\))?$")


def parse_conversions(text: str, key: str) -> Conversions:
    """The conversions of ``text`` (module docstring); raises :class:`ConversionError` naming ``key``."""
    if PLACEHOLDER in str(text):
        raise ConversionError(f"{key}: {PLACEHOLDER} placeholder left in {text!r}; put in your robot's value")
    dims: list[DimConversion] = []
    for entry in (e.strip() for e in str(text).split(";")):
        if not entry:
            raise ConversionError(f"{key}: empty conversion in {text!r} (write identity where nothing converts)")
        match = _ENTRY.match(entry)
        if match is None:
            raise ConversionError(f"{key}: {entry!r} is not 'name', 'name(args)' or 'Nx name(args) clip(lo, hi)'")
        count, name, args_text, clip_text = match.groups()
        converter = CONVERTERS.get(name)
        if converter is None:
            raise ConversionError(f"{key}: unknown converter {name!r}; known: {sorted(CONVERTERS)}")
        args = _numbers(args_text, key, entry)
        if len(args) != len(converter.args) and not converter.variadic:
            raise ConversionError(f"{key}: {name} takes {len(converter.args)} arguments ({', '.join(converter.args) or 'none'}), "
                                  f"got {len(args)} in {entry!r}")  # fmt: skip
        low, high = -math.inf, math.inf
        if clip_text is not None:
            bounds = _numbers(clip_text, key, entry)
            if len(bounds) != 2 or not bounds[0] < bounds[1]:
                raise ConversionError(f"{key}: clip takes (low, high) with low < high, got {entry!r}")
            low, high = bounds
        try:
            to_robot, to_model = converter.make(args)
        except ValueError as exc:
            raise ConversionError(f"{key}: {entry!r}: {exc}") from None
        n = int(count) if count is not None else 1
        if n < 1:
            raise ConversionError(f"{key}: {entry!r} repeats a conversion 0 times")
        single = entry[match.start(2) :] if count is not None else entry
        dims.extend([DimConversion(single, to_robot, to_model, low, high)] * n)
    return Conversions(tuple(dims))


def identities(n: int) -> Conversions:
    return parse_conversions(f"{n}x identity", "identities") if n else Conversions(())


def _numbers(text: str | None, key: str, entry: str) -> list[float]:
    if text is None or not text.strip():
        return []
    out = []
    for part in (p.strip() for p in text.split(",")):
        try:
            value = float(part)
        except ValueError:
            raise ConversionError(f"{key}: {part!r} in {entry!r} is not a number") from None
        if not math.isfinite(value):
            raise ConversionError(f"{key}: {part!r} in {entry!r} is not finite")
        out.append(value)
    return out
