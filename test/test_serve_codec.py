"""oxygen-serve's wire codec (openpi's msgpack numpy encoding, no pickle), the observation layouts and the text
beside the actions, without a server."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from oxygen_ros.engine import ASK_TASK, TextEvent
from oxygen_ros.serve.codec import FrameRefused, MessageError, pack, unpack
from oxygen_ros.serve.layouts import LAYOUTS, ObservationError, layout_for
from oxygen_ros.serve.text_board import TextBoard


@pytest.mark.parametrize("dtype", ["<f4", "<f8", "|u1", "<i8", "|b1"])
def test_arrays_round_trip_with_bin_marker_keys(dtype: str) -> None:
    array = (np.arange(24) % 3).astype(dtype).reshape(2, 3, 4)
    frame = pack({"actions": array, "n": np.float32(1.5)})
    raw = msgpack.unpackb(frame, raw=False)
    assert set(raw["actions"]) == {b"__ndarray__", b"data", b"dtype", b"shape"} and raw["actions"][b"dtype"] == dtype
    assert set(raw["n"]) == {b"__npgeneric__", b"data", b"dtype"}
    back = unpack(frame)
    np.testing.assert_array_equal(back["actions"], array)
    assert back["actions"].flags.writeable and back["n"] == np.float32(1.5)


def _marker(dtype: object, shape: object, data: object) -> bytes:
    return msgpack.packb({"x": {b"__ndarray__": True, b"dtype": dtype, b"shape": shape, b"data": data}})


@pytest.mark.parametrize("frame, says", [
    ("text", "text frame"), (b"\xc1", "not msgpack"), (msgpack.packb([1, 2]), "must be a msgpack map"),
    (_marker("|O", [1], b"\0" * 8), "not allowed"), (_marker("<c8", [1], b"\0" * 8), "not allowed"),
    (_marker("<f4", [3], b"\0" * 8), "needs 12 bytes, got 8"), (_marker("<f4", [-1], b""), "shape must be"),
    (_marker("<f4", [1] * 9, b"\0" * 4), "at most 8"), (_marker("nope", [1], b"\0"), "unknown array dtype"),
    (_marker("<f4", [1], "text"), "data must be msgpack bin"),
])  # fmt: skip
def test_malformed_frames_are_named(frame: bytes | str, says: str) -> None:
    with pytest.raises(MessageError, match=says):
        unpack(frame)


def _nested(levels: int) -> bytes:
    return b"\x81\xa1x" + b"\x91" * levels + b"\xc0"  # {"x": [[...[nil]...]]}


@pytest.mark.parametrize("frame, says", [
    (b"\xdf" + (1 << 24).to_bytes(4, "big"), "declares a map of 16777216 entries; this server accepts at most 256"),
    (msgpack.packb({"x": "a" * 70000}), "declares a string of 70000 bytes; this server accepts at most 65536"),
    (msgpack.packb({"x": msgpack.ExtType(5, b"a")}), "msgpack extension type"),
    (_nested(16), "deeper than 16 levels"), (_nested(5000), "deeper than 16 levels"),
    (msgpack.packb({"x": [[0] * 1000] * 17}), "more than 16384 map entries and array items"),
])  # fmt: skip
def test_frames_past_the_bounds_are_refused(frame: bytes, says: str) -> None:
    with pytest.raises(FrameRefused, match=says):
        unpack(frame)


def test_frames_at_the_bounds_decode() -> None:
    assert unpack(_nested(15))["x"] == [[[[[[[[[[[[[[[None]]]]]]]]]]]]]]]
    assert len(unpack(msgpack.packb({"x": [[0] * 1000] * 16}))["x"]) == 16
    big = np.zeros((3, 2048, 2048), np.uint8)  # the largest image a layout accepts: one bin, bounded by the frame
    assert unpack(pack({"images": {"cam_high": big}, "prompt": "p" * 2000}))["images"]["cam_high"].shape == big.shape


def _chw(seed: int, h: int = 20, w: int = 30) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (3, h, w), dtype=np.uint8)


def test_aloha_layout_fills_openpi_slots() -> None:
    images = {"cam_high": _chw(0), "cam_low": _chw(1), "cam_right_wrist": _chw(2)}
    obs = LAYOUTS["aloha"].observation({"state": np.zeros(14), "images": images}, "Transfer cube")
    assert obs.prompt == "Transfer cube" and obs.ask is None and obs.state.dtype == np.float64
    np.testing.assert_array_equal(obs.images[0], images["cam_high"].transpose(1, 2, 0))
    assert obs.images[1] is None  # no left wrist: a masked slot; cam_low is not used, as openpi
    np.testing.assert_array_equal(obs.images[2], images["cam_right_wrist"].transpose(1, 2, 0))
    floats = LAYOUTS["aloha"].observation({"state": np.zeros(14), "images": {"cam_high": np.full((3, 4, 4), 0.5)}}, "x")
    assert floats.images[0].dtype == np.uint8 and floats.images[0][0, 0, 0] == 127


@pytest.mark.parametrize("layout, obs, says", [
    ("aloha", {"state": np.zeros(14), "images": {"cam_high": _chw(0), "cam_top": _chw(1)}}, "unknown cameras \\['cam_top'\\]"),
    ("aloha", {"state": np.zeros(14), "images": {"cam_low": _chw(0)}}, "cam_high is required"),
    ("aloha", {"state": np.full(14, np.nan), "images": {"cam_high": _chw(0)}}, "state: holds NaN"),
    ("aloha", {"state": np.zeros(14), "images": {"cam_high": _chw(0, 3000, 10)}}, "3000x10 pixels"),
    ("droid", {"observation/exterior_image_1_left": _chw(0).transpose(1, 2, 0)}, "missing key 'observation/wrist_image_left'"),
    ("libero", {"observation/image": _chw(0).transpose(1, 2, 0), "observation/wrist_image": _chw(1).transpose(1, 2, 0),
                "observation/state": np.zeros(7), "prompt": "go"}, "observation/state: expected 8 values"),
    ("libero", {"observation/image": _chw(0).transpose(1, 2, 0), "observation/wrist_image": _chw(1).transpose(1, 2, 0),
                "observation/state": np.zeros(8)}, "missing key 'prompt'"),
])  # fmt: skip
def test_layouts_name_the_problem(layout: str, obs: dict, says: str) -> None:
    with pytest.raises(ObservationError, match=says):
        LAYOUTS[layout].observation(obs, None)


def test_droid_state_and_layout_choice() -> None:
    image = _chw(0).transpose(1, 2, 0)
    obs = LAYOUTS["droid"].observation({"observation/exterior_image_1_left": image, "observation/wrist_image_left": image,
                                        "observation/joint_position": np.arange(7.0), "observation/gripper_position": np.array([0.5]),
                                        "prompt": "open the drawer", "ask": "what next?"}, None)  # fmt: skip
    np.testing.assert_array_equal(obs.state, [0, 1, 2, 3, 4, 5, 6, 0.5])
    assert obs.images[2] is None and obs.ask == "what next?"
    assert layout_for("libero").name == "libero" and layout_for("none", "droid").name == "droid"
    with pytest.raises(ValueError, match="no openpi observation layout for embodiment 'scale_offset'"):
        layout_for("scale_offset")


def _event(rid: int, task: str, text: str, frame: int, final: bool = False) -> TextEvent:
    return TextEvent(rid, task, 0, text, [], final, "eos" if final else "", frame, 0, "")


def test_text_board_keeps_each_task_latest_and_answers_until_done() -> None:
    board = TextBoard()
    for event in (_event(1, "narration", " lift", 0), _event(1, "narration", " the cube", 0), _event(2, "memory", " a", 0)):
        board.add(event)
    board.asked(3, "where?")
    board.add(_event(3, ASK_TASK, " left", 1))
    out = board.reply_fields()
    assert out["text"]["narration"] == {"text": " lift the cube", "frame": 0, "done": False, "finish_reason": ""}
    assert out["answers"] == [{"id": 3, "question": "where?", "text": " left", "frame": 1, "done": False, "finish_reason": ""}]
    board.add(_event(4, "narration", " hand", 2))  # a newer frame's narration replaces the older one
    board.add(_event(1, "narration", " late", 0, final=True))  # ... and the older request's late end does not
    board.add(_event(3, ASK_TASK, "", 1, final=True))
    out = board.reply_fields()
    assert out["text"]["narration"]["text"] == " hand" and out["text"]["narration"]["frame"] == 2
    assert out["answers"][0]["done"] and "answers" not in board.reply_fields()  # sent once finished


def test_cli_refuses_bad_settings_before_serving(tmp_path, capsys) -> None:
    from oxygen_ros.serve.cli import main

    assert main(["--params-file", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    params = tmp_path / "p.yaml"
    params.write_text("embodiment: scale_offset\nunit_scale: [1.0]\n")
    assert main(["--params-file", str(params), "--port", "0"]) == 2
    assert "no openpi observation layout for embodiment 'scale_offset'" in capsys.readouterr().err
    assert main(["--params-file", str(params), "--metadata", "[1]"]) == 2
    assert "--metadata must be a JSON map" in capsys.readouterr().err


def test_metadata_takes_the_params_files_reset_pose() -> None:
    from oxygen_ros.serve.cli import served_metadata
    from oxygen_ros.serve.layouts import ALOHA_RESET_POSE

    layout_metadata = {"reset_pose": ALOHA_RESET_POSE}
    assert served_metadata(layout_metadata, {"reset_pose": [0.0, -1.5, 1.5, 0.0, 0.0, 0.0]}) == {
        "reset_pose": [0.0, -1.5, 1.5, 0.0, 0.0, 0.0]}
    assert served_metadata(layout_metadata, {"reset_pose": []}) == {"reset_pose": ALOHA_RESET_POSE}
    assert served_metadata({}, {}) == {}
