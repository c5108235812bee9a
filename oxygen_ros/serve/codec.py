"""openpi's msgpack encoding of numpy data (``openpi_client.msgpack_numpy``), written and read without pickle.

An array travels as a map whose marker keys are msgpack *bin*: ``b"__ndarray__"``, ``b"data"`` (C-order
bytes), ``b"dtype"`` (a numpy dtype string such as ``"<f4"``), ``b"shape"``; a numpy scalar as
``b"__npgeneric__"``, ``b"data"``, ``b"dtype"``. User keys are msgpack str. Decoding checks every marker map
(known dtype kinds only, data length = shape × item size) and returns writable copies, so nothing a client
sends reaches numpy's object or pickle paths. What a frame may expand to is bounded (``frame_bounds``).
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np

from .frame_bounds import FrameBounds, FrameRefused, ObjectBudget, check_depth, refusal_for_limit

__all__ = ["FrameBounds", "FrameRefused", "MessageError", "pack", "unpack"]

ARRAY_KEY, SCALAR_KEY = b"__ndarray__", b"__npgeneric__"
ALLOWED_KINDS = "biuf"  # bool, signed and unsigned integers, floats: what robot observations hold
MAX_DIMS = 8


class MessageError(ValueError):
    """A request that is not openpi's msgpack, or holds an array map that cannot be an array."""


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in ALLOWED_KINDS:
            raise TypeError(f"cannot send an array of dtype {obj.dtype}")
        data = np.ascontiguousarray(obj)
        return {ARRAY_KEY: True, b"data": data.tobytes(), b"dtype": data.dtype.str, b"shape": list(data.shape)}
    if isinstance(obj, np.generic):
        return {SCALAR_KEY: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot encode {type(obj).__name__}")


def pack(obj: Any) -> bytes:
    """A reply (or metadata) as openpi's client decodes it."""
    return msgpack.packb(obj, default=_pack_default, use_bin_type=True)


def _dtype(value: Any) -> np.dtype:
    text = value.decode() if isinstance(value, bytes) else value
    if not isinstance(text, str) or len(text) > 8:
        raise MessageError(f"array dtype must be a numpy dtype string such as '<f4', got {value!r}")
    try:
        dtype = np.dtype(text)
    except TypeError:
        raise MessageError(f"unknown array dtype {text!r}") from None
    if dtype.kind not in ALLOWED_KINDS:
        raise MessageError(f"array dtype {text!r} is not allowed (bool, integer and float arrays only)")
    return dtype


def _array(obj: dict) -> np.ndarray:
    dtype = _dtype(obj.get(b"dtype"))
    shape, data = obj.get(b"shape"), obj.get(b"data")
    if not isinstance(shape, (list, tuple)) or len(shape) > MAX_DIMS or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise MessageError(f"array shape must be a list of at most {MAX_DIMS} sizes, got {shape!r}")
    if not isinstance(data, bytes):
        raise MessageError("array data must be msgpack bin")
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise MessageError(f"array of shape {list(shape)} and dtype {dtype.str} needs {expected} bytes, got {len(data)}")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _object_hook(obj: dict) -> Any:
    if ARRAY_KEY in obj:
        return _array(obj)
    if SCALAR_KEY in obj:
        dtype = _dtype(obj.get(b"dtype"))
        value = obj.get(b"data")
        if not isinstance(value, (bool, int, float)):
            raise MessageError(f"numpy scalar data must be a number, got {type(value).__name__}")
        return dtype.type(value)
    return obj


def unpack(frame: bytes | str, bounds: FrameBounds = FrameBounds()) -> dict[str, Any]:
    """A request → its map; raises :class:`MessageError` saying why it is not one, or :class:`FrameRefused`
    where it would expand past ``bounds``."""
    if isinstance(frame, str):
        raise MessageError("requests are binary msgpack frames; got a text frame")
    budget = ObjectBudget(bounds)

    def on_map(obj: dict) -> Any:
        budget.spend(obj)
        return _object_hook(obj)

    def on_list(obj: list) -> list:
        budget.spend(obj)
        return obj

    try:
        obj = msgpack.unpackb(frame, object_hook=on_map, list_hook=on_list, raw=False, strict_map_key=False,
                              **bounds.unpacker_limits())  # fmt: skip
    except (MessageError, FrameRefused):
        raise
    except msgpack.StackError:  # deeper than msgpack's own stack (1024 levels)
        raise FrameRefused(f"the request nests maps and arrays deeper than {bounds.max_depth} levels") from None
    except Exception as exc:  # msgpack's own errors: ExtraData, FormatError, ValueError ...
        refusal = refusal_for_limit(exc) if isinstance(exc, ValueError) else None
        if refusal is not None:
            raise refusal from None
        raise MessageError(f"the request is not msgpack: {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, dict):
        raise MessageError(f"a request must be a msgpack map of observation keys, got {type(obj).__name__}")
    check_depth(obj, bounds.max_depth)
    return obj
