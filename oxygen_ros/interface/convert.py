"""Conversions between ROS 2 messages and plain numpy / Python values.

Pure functions, no node and no rclpy context: they only read and build message objects, so they
also accept messages deserialized by `rosbags` (duck-typed attribute access). Images are converted
with numpy alone (cv_bridge is not available for ROS 2 from PyPI, see DESIGN §4).

Errors are `ValueError` subclasses whose message says what is wrong with which field, so the node
can log one clear line and publish nothing rather than something wrong.
"""

from __future__ import annotations

import array
import io
import math
from typing import Any, Sequence

import numpy as np
from builtin_interfaces.msg import Duration, Time
from oxygen_ros_msgs.msg import ActionChunk, TextDelta
from sensor_msgs.msg import CompressedImage, Image, JointState

__all__ = [
    "FINISH_REASONS",
    "ImageConversionError",
    "JointStateError",
    "action_chunk_msg",
    "array_to_image",
    "compressed_image_to_array",
    "duration_from_s",
    "image_to_array",
    "joint_positions",
    "ns_to_stamp",
    "stamp_to_ns",
    "text_delta_msg",
]

NS_PER_S = 1_000_000_000

# TextDelta.finish_reason values allowed on the final delta ("" while streaming).
FINISH_REASONS = frozenset({"eos", "max_tokens", "stop", "cancelled"})


class ImageConversionError(ValueError):
    """An image message cannot be turned into an RGB array (bad encoding, sizes or data)."""


class JointStateError(ValueError):
    """A JointState message does not provide valid positions for the requested joints."""


# encoding -> (channels, bytes per channel, channel order of the source). Generic OpenCV encodings
# follow OpenCV's convention: 8UC3 is BGR and 8UC4 is BGRA, as cv_bridge hands them to OpenCV.
_ENCODINGS: dict[str, tuple[int, int, str]] = {
    "rgb8": (3, 1, "rgb"),
    "bgr8": (3, 1, "bgr"),
    "8UC3": (3, 1, "bgr"),
    "rgba8": (4, 1, "rgba"),
    "bgra8": (4, 1, "bgra"),
    "8UC4": (4, 1, "bgra"),
    "mono8": (1, 1, "mono"),
    "8UC1": (1, 1, "mono"),
    "mono16": (1, 2, "mono"),
    "16UC1": (1, 2, "mono"),
}
SUPPORTED_ENCODINGS = tuple(_ENCODINGS)


def _as_uint8_buffer(data: Any) -> np.ndarray:
    """View message bytes (bytes, array.array('B'), numpy array or list of ints) as flat uint8."""
    try:
        return np.frombuffer(data, dtype=np.uint8)
    except (TypeError, ValueError):
        return np.asarray(data, dtype=np.uint8).reshape(-1)


def _mono16_to_8(values: np.ndarray) -> np.ndarray:
    """Scale the full 16-bit range linearly to 8 bits (0 -> 0, 65535 -> 255, rounded).

    A fixed scale (not per-image min/max) keeps brightness stable from frame to frame.
    """
    return ((values.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)


def image_to_array(msg: Image) -> np.ndarray:
    """Convert a `sensor_msgs/Image` to a contiguous HxWx3 uint8 RGB array.

    Supported encodings: rgb8, bgr8, rgba8, bgra8 (alpha dropped), mono8/8UC1 (grey replicated to
    three channels), mono16/16UC1 (scaled linearly from the full 16-bit range to 8 bits), 8UC3 (read
    as BGR, OpenCV's order) and 8UC4 (read as BGRA). Row padding (`step` larger than
    width x pixel size) is skipped; 16-bit data honours `is_bigendian`.

    Raises:
        ImageConversionError: unsupported encoding, zero width or height, `step` smaller than a
            row, or `data` whose length is not height x step.
    """
    encoding = str(msg.encoding)
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if encoding not in _ENCODINGS:
        raise ImageConversionError(
            f"image encoding {encoding!r} is not supported (supported: {', '.join(SUPPORTED_ENCODINGS)})"
        )
    channels, depth, order = _ENCODINGS[encoding]
    if height <= 0 or width <= 0:
        raise ImageConversionError(f"image has zero size: height={height}, width={width}")
    row_bytes = width * channels * depth
    if step < row_bytes:
        raise ImageConversionError(
            f"image step {step} is smaller than one row of {width} px x {channels * depth} bytes"
            f" = {row_bytes} (encoding {encoding})"
        )
    data = _as_uint8_buffer(msg.data)
    if data.size != height * step:
        raise ImageConversionError(
            f"image data has {data.size} bytes, expected height x step = {height} x {step} = {height * step}"
        )
    rows = data.reshape(height, step)[:, :row_bytes]
    if depth == 2:
        dtype = np.dtype(">u2" if msg.is_bigendian else "<u2")
        grey = _mono16_to_8(np.ascontiguousarray(rows).view(dtype).reshape(height, width))
        return np.ascontiguousarray(np.repeat(grey[:, :, None], 3, axis=2))
    pixels = rows.reshape(height, width, channels)
    if order == "mono":
        out = np.repeat(pixels, 3, axis=2)
    elif order.startswith("bgr"):
        out = pixels[:, :, 2::-1]
    else:
        out = pixels[:, :, :3]
    return np.ascontiguousarray(out)


def compressed_image_to_array(msg: CompressedImage) -> np.ndarray:
    """Decode a `sensor_msgs/CompressedImage` (JPEG or PNG, as image_transport's "compressed"
    plugin writes them) to a HxWx3 uint8 RGB array with Pillow. 16-bit PNGs are scaled to 8 bits
    like mono16.

    Raises:
        ImageConversionError: empty data, a "compressedDepth" image, or bytes Pillow cannot decode.
    """
    from PIL import Image as PILImage  # imported here: only this function needs Pillow

    fmt = str(msg.format)
    if "compresseddepth" in fmt.lower():
        raise ImageConversionError(
            f"compressed image format {fmt!r} (compressedDepth) is not supported; use jpeg or png"
        )
    data = bytes(_as_uint8_buffer(msg.data))
    if not data:
        raise ImageConversionError(f"compressed image (format {fmt!r}) has no data")
    try:
        with PILImage.open(io.BytesIO(data)) as img:
            img.load()
            if img.mode in ("I;16", "I;16B", "I;16L", "I"):
                grey = _mono16_to_8(np.clip(np.asarray(img), 0, 65535))
                return np.ascontiguousarray(np.repeat(grey[:, :, None], 3, axis=2))
            return np.ascontiguousarray(np.asarray(img.convert("RGB"), dtype=np.uint8))
    except (OSError, ValueError, SyntaxError) as exc:  # Pillow raises all three for bad data
        raise ImageConversionError(
            f"cannot decode compressed image (format {fmt!r}, {len(data)} bytes): {exc}"
        ) from exc


def array_to_image(
    arr: np.ndarray,
    encoding: str = "rgb8",
    stamp: Time | int | None = None,
    frame_id: str = "",
    *,
    row_padding: int = 0,
    is_bigendian: bool = False,
) -> Image:
    """Build a `sensor_msgs/Image` from an array already in `encoding`'s channel order.

    `arr` is HxWxC uint8 for 3/4-channel encodings, HxW (or HxWx1) uint8 for mono8/8UC1 and HxW
    uint16 for mono16/16UC1. `stamp` is a `builtin_interfaces/Time` or integer nanoseconds.
    `row_padding` adds that many zero bytes after each row (so `step` > row size) and
    `is_bigendian` stores 16-bit data big-endian; both exist to exercise readers.
    """
    if encoding not in _ENCODINGS:
        raise ImageConversionError(
            f"image encoding {encoding!r} is not supported (supported: {', '.join(SUPPORTED_ENCODINGS)})"
        )
    channels, depth, _ = _ENCODINGS[encoding]
    arr = np.asarray(arr)
    if arr.ndim == 3 and channels == 1 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    expected_ndim = 2 if channels == 1 else 3
    if arr.ndim != expected_ndim or (channels > 1 and arr.shape[2] != channels):
        want = "HxW" if channels == 1 else f"HxWx{channels}"
        raise ImageConversionError(f"array of shape {arr.shape} does not fit encoding {encoding!r} ({want})")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ImageConversionError(f"array of shape {arr.shape} has zero size")
    if row_padding < 0:
        raise ImageConversionError(f"row_padding must be >= 0, got {row_padding}")
    if depth == 1:
        pixels = arr.astype(np.uint8, copy=False)
    else:
        pixels = arr.astype(np.dtype(">u2" if is_bigendian else "<u2"), copy=False)
    height, width = arr.shape[:2]
    rows = np.ascontiguousarray(pixels).view(np.uint8).reshape(height, width * channels * depth)
    if row_padding:
        rows = np.concatenate([rows, np.zeros((height, row_padding), dtype=np.uint8)], axis=1)
    msg = Image()
    msg.header.frame_id = frame_id
    if stamp is not None:
        msg.header.stamp = _as_time(stamp)
    msg.height, msg.width = int(height), int(width)
    msg.encoding = encoding
    msg.is_bigendian = bool(is_bigendian and depth > 1)
    msg.step = int(rows.shape[1])
    msg.data = array.array("B", rows.tobytes())
    return msg


def joint_positions(msg: JointState, names: Sequence[str]) -> np.ndarray:
    """Positions of `names`, in that order, from a `sensor_msgs/JointState`, as float64 (the message's own precision:
    an ALOHA finger at its open end loses 3e-4 of its converted state in float32).

    Raises:
        JointStateError: fewer positions than names in the message, requested joints missing from
            it (all are named), or a requested position that is NaN or infinite.
    """
    msg_names = list(msg.name)
    positions = np.asarray(msg.position, dtype=np.float64)
    if positions.size < len(msg_names):
        raise JointStateError(
            f"joint state has {len(msg_names)} names but only {positions.size} positions"
        )
    index: dict[str, int] = {}
    for i, name in enumerate(msg_names):
        index.setdefault(name, i)  # first occurrence wins on duplicated names
    missing = [n for n in names if n not in index]
    if missing:
        raise JointStateError(f"joint state lacks joints {missing} (it has {msg_names})")
    values = positions[np.asarray([index[n] for n in names], dtype=np.intp)]
    bad = [n for n, v in zip(names, values) if not math.isfinite(v)]
    if bad:
        raise JointStateError(f"joint state has non-finite positions for joints {bad}")
    return values


def stamp_to_ns(stamp: Any) -> int:
    """Integer nanoseconds of a `builtin_interfaces/Time` or `Duration` (anything with sec, nanosec)."""
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def ns_to_stamp(ns: int) -> Time:
    """`builtin_interfaces/Time` for integer nanoseconds (must be >= 0 and fit int32 seconds)."""
    ns = int(ns)
    if ns < 0:
        raise ValueError(f"a time stamp cannot be negative: {ns} ns")
    sec, nanosec = divmod(ns, NS_PER_S)
    if sec > 2**31 - 1:
        raise ValueError(f"time stamp {ns} ns overflows int32 seconds")
    return Time(sec=sec, nanosec=nanosec)


def duration_from_s(seconds: float) -> Duration:
    """`builtin_interfaces/Duration` for float seconds, rounded to the nanosecond.

    Negative durations keep nanosec in [0, 1e9) with negative sec, as ROS does.
    """
    if not math.isfinite(seconds):
        raise ValueError(f"duration must be finite, got {seconds}")
    sec, nanosec = divmod(round(seconds * NS_PER_S), NS_PER_S)
    if not -(2**31) <= sec < 2**31:
        raise ValueError(f"duration {seconds} s overflows int32 seconds")
    return Duration(sec=int(sec), nanosec=int(nanosec))


def _as_time(stamp: Time | int) -> Time:
    """Accept a Time-like message (copied) or integer nanoseconds."""
    if isinstance(stamp, (int, np.integer)):
        return ns_to_stamp(int(stamp))
    return Time(sec=int(stamp.sec), nanosec=int(stamp.nanosec))


def action_chunk_msg(
    actions: np.ndarray,
    *,
    stamp: Time | int,
    frame_seq: int,
    step_period_s: float,
    joint_names: Sequence[str] = (),
    prefill_latency_s: float = 0.0,
    action_latency_s: float = 0.0,
    engine_mode: str = "",
    frame_id: str = "",
    latency_s: float = 0.0,
    n_action_steps: int = 0,
) -> ActionChunk:
    """Build an `oxygen_ros_msgs/ActionChunk` from a (horizon, action_dim) array.

    `stamp` is the observation's time (Time or integer ns). Raises ValueError for an array that is
    not 2-D, is empty, holds NaN/inf (a robot must never get those), or has fewer columns than
    joint names, and for a step period that is not positive.
    """
    values = np.asarray(actions, dtype=np.float32)
    if values.ndim != 2:
        raise ValueError(f"actions must be a (horizon, action_dim) array, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"actions of shape {values.shape} contain NaN or infinite values")
    horizon, action_dim = values.shape
    if horizon == 0 or action_dim == 0:
        raise ValueError(f"actions array of shape {values.shape} is empty")
    if len(joint_names) > action_dim:
        raise ValueError(f"{len(joint_names)} joint names for only {action_dim} action dimensions")
    if not step_period_s > 0:
        raise ValueError(f"step_period_s must be > 0, got {step_period_s}")
    msg = ActionChunk()
    msg.header.stamp = _as_time(stamp)
    msg.header.frame_id = frame_id
    msg.frame_seq = int(frame_seq)
    msg.joint_names = [str(n) for n in joint_names]
    msg.horizon = int(horizon)
    msg.action_dim = int(action_dim)
    msg.step_period = duration_from_s(step_period_s)
    data = array.array("f")
    data.frombytes(np.ascontiguousarray(values).tobytes())  # row-major, native float32
    msg.data = data
    msg.prefill_latency_s = float(prefill_latency_s)
    msg.action_latency_s = float(action_latency_s)
    msg.engine_mode = engine_mode
    msg.latency_s = float(latency_s)
    msg.n_action_steps = int(n_action_steps)
    return msg


def text_delta_msg(
    *,
    request_id: int,
    task: str,
    seq: int,
    text: str,
    token_ids: Sequence[int] | np.ndarray = (),
    final: bool = False,
    finish_reason: str = "",
    stamp: Time | int,
    source_stamp: Time | int,
    source_frame_seq: int,
    frame_id: str = "",
) -> TextDelta:
    """Build an `oxygen_ros_msgs/TextDelta`.

    `finish_reason` must be "" unless `final`, and one of FINISH_REASONS when `final`; anything
    else raises ValueError. Stamps are Time messages or integer nanoseconds.
    """
    if final and finish_reason not in FINISH_REASONS:
        raise ValueError(
            f"final text delta needs finish_reason in {sorted(FINISH_REASONS)}, got {finish_reason!r}"
        )
    if not final and finish_reason:
        raise ValueError(f"finish_reason must be empty while streaming, got {finish_reason!r}")
    msg = TextDelta()
    msg.header.stamp = _as_time(stamp)
    msg.header.frame_id = frame_id
    msg.request_id = int(request_id)
    msg.task = task
    msg.seq = int(seq)
    msg.text = text
    msg.token_ids = array.array("i", (int(t) for t in np.asarray(token_ids, dtype=np.int64).reshape(-1)))
    msg.final = bool(final)
    msg.finish_reason = finish_reason
    msg.source_stamp = _as_time(source_stamp)
    msg.source_frame_seq = int(source_frame_seq)
    return msg
