"""oxygen_ros.interface.convert: image, joint-state, stamp and message-builder conversions."""

from __future__ import annotations

import io
import math
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image as PILImage

from builtin_interfaces.msg import Time
from oxygen_ros.interface.convert import (
    ImageConversionError,
    JointStateError,
    action_chunk_msg,
    array_to_image,
    compressed_image_to_array,
    duration_from_s,
    image_to_array,
    joint_positions,
    ns_to_stamp,
    stamp_to_ns,
    text_delta_msg,
)
from sensor_msgs.msg import CompressedImage, Image, JointState

RNG = np.random.default_rng(0)
RGB = RNG.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
GREY = RNG.integers(0, 256, size=(5, 7), dtype=np.uint8)
GREY16 = RNG.integers(0, 65536, size=(5, 7), dtype=np.uint16)


def raw_image(encoding: str, pixels: np.ndarray, pad: int = 0, big_endian: bool = False) -> Image:
    """An Image built by hand (independent of array_to_image); padding bytes are junk (0xAB)."""
    height, width = pixels.shape[:2]
    if pixels.dtype == np.uint16:
        pixels = pixels.astype(">u2" if big_endian else "<u2")
    rows = np.ascontiguousarray(pixels).view(np.uint8).reshape(height, -1)
    rows = np.concatenate([rows, np.full((height, pad), 0xAB, dtype=np.uint8)], axis=1)
    return Image(
        height=height,
        width=width,
        encoding=encoding,
        is_bigendian=big_endian,
        step=rows.shape[1],
        data=rows.tobytes(),
    )


def grey_to_rgb(grey: np.ndarray) -> np.ndarray:
    return np.repeat(grey[:, :, None], 3, axis=2)


def scale16(values: np.ndarray) -> np.ndarray:
    return np.round(values.astype(np.float64) * 255 / 65535).astype(np.uint8)


ALPHA = np.full((5, 7, 1), 200, dtype=np.uint8)
CASES = {
    "rgb8": (RGB, RGB),
    "bgr8": (RGB[:, :, ::-1], RGB),
    "8UC3": (RGB[:, :, ::-1], RGB),  # OpenCV order: BGR
    "rgba8": (np.concatenate([RGB, ALPHA], axis=2), RGB),
    "bgra8": (np.concatenate([RGB[:, :, ::-1], ALPHA], axis=2), RGB),
    "8UC4": (np.concatenate([RGB[:, :, ::-1], ALPHA], axis=2), RGB),
    "mono8": (GREY, grey_to_rgb(GREY)),
    "8UC1": (GREY, grey_to_rgb(GREY)),
    "mono16": (GREY16, grey_to_rgb(scale16(GREY16))),
    "16UC1": (GREY16, grey_to_rgb(scale16(GREY16))),
}


@pytest.mark.parametrize("encoding", sorted(CASES))
@pytest.mark.parametrize("pad", [0, 3])
def test_every_encoding_with_and_without_row_padding(encoding, pad):
    source, expected = CASES[encoding]
    out = image_to_array(raw_image(encoding, source, pad=pad))
    assert out.dtype == np.uint8 and out.shape == (5, 7, 3) and out.flags.c_contiguous
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("encoding", ["mono16", "16UC1"])
def test_big_endian_16_bit(encoding):
    values = np.array([[0, 256, 32768, 65535]], dtype=np.uint16)
    big = image_to_array(raw_image(encoding, values, pad=2, big_endian=True))
    little = image_to_array(raw_image(encoding, values, big_endian=False))
    np.testing.assert_array_equal(big[0, :, 0], [0, 1, 128, 255])
    np.testing.assert_array_equal(big, little)


def test_data_as_numpy_array_or_list_is_accepted():
    """rosbags hands over numpy arrays, hand-made messages may use lists: both work."""
    msg = raw_image("rgb8", RGB)
    fields = ("height", "width", "encoding", "is_bigendian", "step")
    as_numpy = SimpleNamespace(**{k: getattr(msg, k) for k in fields})
    as_numpy.data = np.frombuffer(bytes(msg.data), dtype=np.uint8)
    np.testing.assert_array_equal(image_to_array(as_numpy), RGB)
    as_list = SimpleNamespace(**vars(as_numpy))
    as_list.data = list(bytes(msg.data))
    np.testing.assert_array_equal(image_to_array(as_list), RGB)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"encoding": "yuv422"}, "encoding 'yuv422' is not supported"),
        ({"encoding": "32FC1"}, "encoding '32FC1' is not supported"),
        ({"height": 0, "data": b""}, "zero size"),
        ({"width": 0}, "zero size"),
        ({"step": 20}, "step 20 is smaller than one row of 7 px x 3 bytes = 21"),
        ({"data": bytes(5 * 21 - 1)}, "104 bytes, expected height x step = 5 x 21 = 105"),
        ({"data": bytes(5 * 21 + 21)}, "126 bytes, expected"),
    ],
)
def test_bad_images_raise_clear_errors(change, message):
    msg = raw_image("rgb8", RGB)
    for key, value in change.items():
        setattr(msg, key, value)
    with pytest.raises(ImageConversionError, match=message) as info:
        image_to_array(msg)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("encoding", sorted(CASES))
def test_array_to_image_round_trip(encoding):
    source, expected = CASES[encoding]
    msg = array_to_image(source, encoding, stamp=15_000_000_005, frame_id="cam")
    assert msg.encoding == encoding and (msg.height, msg.width) == (5, 7)
    assert msg.header.frame_id == "cam" and stamp_to_ns(msg.header.stamp) == 15_000_000_005
    np.testing.assert_array_equal(image_to_array(msg), expected)


def test_array_to_image_padding_and_big_endian():
    msg = array_to_image(GREY16, "16UC1", row_padding=4, is_bigendian=True)
    assert msg.step == 7 * 2 + 4 and msg.is_bigendian
    assert bytes(msg.data)[:2] == int(GREY16[0, 0]).to_bytes(2, "big")
    np.testing.assert_array_equal(image_to_array(msg), CASES["16UC1"][1])
    assert array_to_image(RGB, stamp=Time(sec=3, nanosec=4)).header.stamp == Time(sec=3, nanosec=4)


@pytest.mark.parametrize(
    ("arr", "encoding", "message"),
    [
        (RGB, "mono8", r"shape \(5, 7, 3\) does not fit encoding 'mono8'"),
        (GREY, "rgb8", r"does not fit encoding 'rgb8' \(HxWx3\)"),
        (RGB, "rgba8", "does not fit encoding 'rgba8'"),
        (np.zeros((0, 4, 3), np.uint8), "rgb8", "zero size"),
        (RGB, "jpeg", "not supported"),
    ],
)
def test_array_to_image_rejects_bad_input(arr, encoding, message):
    with pytest.raises(ImageConversionError, match=message):
        array_to_image(arr, encoding)


def encode(pixels: np.ndarray, fmt: str, **kwargs) -> CompressedImage:
    buffer = io.BytesIO()
    PILImage.fromarray(pixels).save(buffer, format=fmt, **kwargs)
    return CompressedImage(format=f"rgb8; {fmt.lower()} compressed bgr8", data=buffer.getvalue())


def test_compressed_png_round_trip_is_exact():
    np.testing.assert_array_equal(compressed_image_to_array(encode(RGB, "PNG")), RGB)
    np.testing.assert_array_equal(compressed_image_to_array(encode(GREY, "PNG")), grey_to_rgb(GREY))


def test_compressed_16_bit_png_is_scaled():
    out = compressed_image_to_array(encode(GREY16, "PNG"))
    np.testing.assert_array_equal(out, CASES["16UC1"][1])


def test_compressed_jpeg_round_trip_is_close():
    smooth = np.zeros((32, 48, 3), dtype=np.uint8)
    smooth[..., 0] = np.linspace(0, 255, 48, dtype=np.uint8)[None, :]
    smooth[..., 1] = np.linspace(0, 255, 32, dtype=np.uint8)[:, None]
    smooth[..., 2] = 90
    out = compressed_image_to_array(encode(smooth, "JPEG", quality=95))
    assert out.shape == smooth.shape and out.dtype == np.uint8
    assert np.abs(out.astype(int) - smooth.astype(int)).mean() < 3


@pytest.mark.parametrize(
    ("msg", "message"),
    [
        (CompressedImage(format="jpeg", data=b""), "has no data"),
        (CompressedImage(format="jpeg", data=b"not an image at all"), "cannot decode compressed image"),
        (CompressedImage(format="16UC1; compressedDepth png", data=b"\0" * 16), "compressedDepth"),
    ],
)
def test_bad_compressed_images_raise_clear_errors(msg, message):
    with pytest.raises(ImageConversionError, match=message):
        compressed_image_to_array(msg)


def joint_state(names, positions) -> JointState:
    return JointState(name=list(names), position=[float(p) for p in positions])


def test_joint_positions_follow_the_requested_order():
    msg = joint_state(["c", "a", "b", "extra"], [3.0, 1.0, 2.0, 9.0])
    out = joint_positions(msg, ["a", "b", "c"])
    assert out.dtype == np.float64  # the message's precision
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])
    assert joint_positions(msg, []).shape == (0,)


def test_joint_positions_name_every_missing_joint():
    with pytest.raises(JointStateError, match=r"lacks joints \['x', 'y'\]"):
        joint_positions(joint_state(["a"], [1.0]), ["x", "a", "y"])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_joint_positions_reject_non_finite_values(bad):
    with pytest.raises(JointStateError, match=r"non-finite positions for joints \['b'\]"):
        joint_positions(joint_state(["a", "b"], [1.0, bad]), ["a", "b"])
    # a non-finite value in a joint nobody asked for is fine
    np.testing.assert_array_equal(joint_positions(joint_state(["a", "b"], [1.0, bad]), ["a"]), [1.0])


def test_joint_positions_reject_short_position_arrays():
    with pytest.raises(JointStateError, match="3 names but only 2 positions"):
        joint_positions(joint_state(["a", "b", "c"], [1.0, 2.0]), ["a"])
    assert issubclass(JointStateError, ValueError)


def test_stamp_helpers():
    ns = 1_700_000_000_123_456_789
    stamp = ns_to_stamp(ns)
    assert (stamp.sec, stamp.nanosec) == (1_700_000_000, 123_456_789)
    assert stamp_to_ns(stamp) == ns
    assert ns_to_stamp(0) == Time()
    with pytest.raises(ValueError, match="negative"):
        ns_to_stamp(-1)
    with pytest.raises(ValueError, match="overflows"):
        ns_to_stamp(2**31 * 1_000_000_000)
    d = duration_from_s(1.5)
    assert (d.sec, d.nanosec) == (1, 500_000_000)
    d = duration_from_s(-0.25)
    assert (d.sec, d.nanosec) == (-1, 750_000_000) and stamp_to_ns(d) == -250_000_000
    with pytest.raises(ValueError, match="finite"):
        duration_from_s(math.nan)


def test_action_chunk_msg():
    actions = np.arange(12, dtype=np.float64).reshape(4, 3) / 8
    msg = action_chunk_msg(
        actions,
        stamp=Time(sec=5, nanosec=6),
        frame_seq=9,
        step_period_s=0.02,
        joint_names=["j0", "j1"],
        prefill_latency_s=0.1,
        action_latency_s=0.05,
        engine_mode="oxygen",
        frame_id="base",
        latency_s=0.25,
        n_action_steps=3,
    )
    assert (msg.horizon, msg.action_dim, msg.frame_seq) == (4, 3, 9)
    assert msg.latency_s == pytest.approx(0.25) and msg.n_action_steps == 3
    assert msg.header.stamp == Time(sec=5, nanosec=6) and msg.header.frame_id == "base"
    assert list(msg.joint_names) == ["j0", "j1"] and msg.engine_mode == "oxygen"
    assert (msg.step_period.sec, msg.step_period.nanosec) == (0, 20_000_000)
    np.testing.assert_array_equal(np.asarray(msg.data).reshape(4, 3), actions.astype(np.float32))
    assert msg.prefill_latency_s == pytest.approx(0.1) and msg.action_latency_s == pytest.approx(0.05)
    assert stamp_to_ns(action_chunk_msg(actions, stamp=7, frame_seq=0, step_period_s=1).header.stamp) == 7


@pytest.mark.parametrize(
    ("actions", "kwargs", "message"),
    [
        (np.zeros(3), {}, r"\(horizon, action_dim\) array, got shape \(3,\)"),
        (np.zeros((0, 3)), {}, "is empty"),
        (np.array([[0.0, np.nan]]), {}, "NaN or infinite"),
        (np.array([[0.0, np.inf]]), {}, "NaN or infinite"),
        (np.zeros((2, 1)), {"joint_names": ["a", "b"]}, "2 joint names for only 1 action dimensions"),
        (np.zeros((2, 1)), {"step_period_s": 0.0}, "step_period_s must be > 0"),
    ],
)
def test_action_chunk_msg_rejects_bad_input(actions, kwargs, message):
    args = {"stamp": 0, "frame_seq": 0, "step_period_s": 0.1, **kwargs}
    with pytest.raises(ValueError, match=message):
        action_chunk_msg(actions, **args)


def test_text_delta_msg():
    msg = text_delta_msg(
        request_id=3,
        task="memory",
        seq=2,
        text=" the cup",
        token_ids=np.array([5, 6, 7]),
        final=True,
        finish_reason="max_tokens",
        stamp=2_000_000_001,
        source_stamp=Time(sec=1, nanosec=0),
        source_frame_seq=11,
        frame_id="policy",
    )
    assert (msg.request_id, msg.task, msg.seq, msg.text) == (3, "memory", 2, " the cup")
    assert list(msg.token_ids) == [5, 6, 7] and msg.final and msg.finish_reason == "max_tokens"
    assert msg.header.stamp == Time(sec=2, nanosec=1) and msg.header.frame_id == "policy"
    assert msg.source_stamp == Time(sec=1) and msg.source_frame_seq == 11
    streaming = text_delta_msg(
        request_id=3, task="memory", seq=0, text="a", stamp=0, source_stamp=0, source_frame_seq=0
    )
    assert not streaming.final and streaming.finish_reason == "" and list(streaming.token_ids) == []


@pytest.mark.parametrize(
    ("final", "reason", "message"),
    [
        (True, "", "final text delta needs finish_reason"),
        (True, "length", "final text delta needs finish_reason"),
        (False, "eos", "must be empty while streaming"),
    ],
)
def test_text_delta_msg_checks_finish_reason(final, reason, message):
    with pytest.raises(ValueError, match=message):
        text_delta_msg(
            request_id=0, task="t", seq=0, text="", final=final, finish_reason=reason,
            stamp=0, source_stamp=0, source_frame_seq=0,
        )
