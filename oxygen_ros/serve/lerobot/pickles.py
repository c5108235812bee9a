"""LeRobot's pickles without running code from them: a restricted unpickler in, lerobot's class names out.

A RobotClient pickles a ``RemotePolicyConfig`` (the policy it wants) and ``TimedObservation``s (raw robot
observations: floats, strings and numpy arrays) and unpickles a list of ``TimedAction`` (torch tensors). Here
the incoming pickles resolve exactly these globals, to this module's stand-ins and guarded numpy constructors:

    lerobot.async_inference.helpers.RemotePolicyConfig / TimedObservation   → PolicySetup / TimedObservation
    numpy._core.multiarray._reconstruct, numpy.ndarray, numpy.dtype          → numeric arrays only

every other global is refused (:class:`PickleRefused`) before anything is called, and a payload over its size
cap is refused before it is read. The replies are pickled with lerobot's module and class names, so the stock
client's ``pickle.loads`` builds its own ``TimedAction``s.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the replies hold tensors; this module never needs torch itself (clients import it fast)
    import torch

HELPERS = "lerobot.async_inference.helpers"  # where lerobot 0.6.1 defines the classes that cross the wire
NUMERIC_KINDS = "biufc"  # bool, ints, floats, complex: no object, void (structured) or string arrays


class PickleRefused(ValueError):
    """A payload that is too big, names a global outside the allowed ones, or is not the expected object."""


class PolicySetup:
    """Stand-in for lerobot's ``RemotePolicyConfig`` (its fields arrive as the pickle's state)."""

    wire_name = (HELPERS, "RemotePolicyConfig")

    policy_type: str
    pretrained_name_or_path: str
    lerobot_features: dict
    actions_per_chunk: int
    device: str = "cpu"
    rename_map: dict | None = None


class TimedObservation:
    """Stand-in for lerobot's ``TimedObservation``: a raw robot observation with its time and step."""

    wire_name = (HELPERS, "TimedObservation")

    timestamp: float
    timestep: int
    observation: dict
    must_go: bool = False


class TimedAction:
    """One action of a chunk, pickled as lerobot's ``TimedAction`` (the client builds its own class)."""

    wire_name = (HELPERS, "TimedAction")

    def __init__(self, timestamp: float, timestep: int, action: "torch.Tensor") -> None:
        self.timestamp = timestamp
        self.timestep = timestep
        self.action = action
        self.text: dict[str, Any] | None = None  # the robot's text tasks' latest (set on a chunk's first action)


class _ArrayClass:
    """What ``numpy.ndarray`` resolves to: only a marker for ``_reconstruct`` (calling it is refused)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise PickleRefused("numpy.ndarray may only be named as the type of a reconstructed array")


def _reconstruct(subtype: Any, shape: Any, dtype_code: Any) -> np.ndarray:
    # numpy pickles an array as _reconstruct(ndarray, (0,), b'b') followed by __setstate__ with the real
    # shape, dtype and bytes (checked against each other by numpy); anything else is not an array pickle.
    if subtype is not _ArrayClass or shape != (0,) or dtype_code != b"b":
        raise PickleRefused("numpy._core.multiarray._reconstruct with arguments no numpy array pickle has")
    return np.ndarray.__new__(np.ndarray, (0,), np.int8)


def _dtype(spec: Any, align: Any = False, copy: Any = False) -> np.dtype:
    if not isinstance(spec, str) or len(spec) > 8:
        raise PickleRefused(f"numpy.dtype of {type(spec).__name__} {str(spec)[:20]!r}: only simple numeric dtypes")
    try:
        dtype = np.dtype(spec, align=bool(align), copy=bool(copy))
    except TypeError as exc:
        raise PickleRefused(f"numpy.dtype {spec!r}: {exc}") from None
    if dtype.kind not in NUMERIC_KINDS or dtype.fields is not None:
        raise PickleRefused(f"numpy.dtype {spec!r}: only numeric arrays are accepted")
    return dtype


ALLOWED: dict[tuple[str, str], Callable[..., Any] | type] = {
    (HELPERS, "RemotePolicyConfig"): PolicySetup,
    (HELPERS, "TimedObservation"): TimedObservation,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): _ArrayClass,
    ("numpy", "dtype"): _dtype,
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        target = ALLOWED.get((module, name))
        if target is None:
            raise PickleRefused(f"the pickle names {module}.{name}, which is not one of the allowed globals")
        return target


def restricted_loads(data: bytes, max_bytes: int) -> Any:
    """Unpickle ``data`` resolving only :data:`ALLOWED`; raises :class:`PickleRefused` saying why not."""
    if len(data) > max_bytes:
        raise PickleRefused(f"a pickle of {len(data)} bytes; at most {max_bytes}")
    try:
        return _RestrictedUnpickler(io.BytesIO(data)).load()
    except PickleRefused:
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed pickle fails in many ways; each is a refusal
        raise PickleRefused(f"not a readable pickle: {type(exc).__name__}: {exc}"[:300]) from None


def load_as(data: bytes, cls: type, max_bytes: int) -> Any:
    """A pickle that must hold one ``cls`` stand-in (its fields are checked by the caller)."""
    value = restricted_loads(data, max_bytes)
    if type(value) is not cls:
        raise PickleRefused(f"expected a pickled {cls.__name__}, got {type(value).__name__}")
    return value


class _LerobotNamesPickler(pickle._Pickler):  # the Python pickler: its save_global can be overridden
    def save_global(self, obj: Any, name: str | None = None) -> None:
        wire = obj.__dict__.get("wire_name") if isinstance(obj, type) else None
        if wire is None:
            super().save_global(obj, name)
            return
        module, qualname = wire
        self.save(module)
        self.save(qualname)
        self.write(pickle.STACK_GLOBAL)
        self.memoize(obj)


def dumps_lerobot(value: Any) -> bytes:
    """``value`` pickled as lerobot pickles it (protocol 4), this module's classes under lerobot's names: the
    replies (a list of ``TimedAction`` with torch tensors) and, for this package's own clients, setups and
    observations."""
    out = io.BytesIO()
    _LerobotNamesPickler(out, protocol=4).dump(value)
    return out.getvalue()


def make(cls: type, **fields: Any) -> Any:
    """A stand-in with these fields (as the unpickler builds one)."""
    value = cls.__new__(cls)
    value.__dict__.update(fields)
    return value
