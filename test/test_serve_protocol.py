"""openpi's robot client (PyPI openpi-client 0.1.1 and 0.1.2, its own venv) against oxygen-serve serving the
committed ALOHA policy: the protocol as openpi's client and server define it (docs/serve.md)."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from openpi_client_env import CLIENT_VERSIONS, REPO, client_python, oxygen_serve, run_client

PARAMS = REPO / "config" / "aloha_demo.yaml"
H = 50  # the committed ALOHA policy's chunk
BROKER_H = 10  # openpi's aloha_sim replans every 10 steps


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    with oxygen_serve(PARAMS, "--max-clients", "8", "--default-prompt", "Transfer cube", log_dir=tmp_path_factory.mktemp("serve")) as s:
        yield s


@pytest.mark.parametrize("version", CLIENT_VERSIONS)
def test_metadata_actions_timings_and_broker(served, version: str) -> None:
    out = run_client(client_python(version), "basics", str(served.port), str(BROKER_H))
    assert out["metadata"] == {"reset_pose": [0.0, -0.96, 1.16, 0.0, -0.3, 0.0]}
    assert out["shapes"] == [[H, 14]] * 3 and out["dtypes"] == ["<f4"] * 3
    assert [sorted(t) for t in out["server_timing"]] == [["infer_ms"], ["infer_ms", "prev_total_ms"], ["infer_ms", "prev_total_ms"]]
    assert all(t["infer_ms"] > 0 for t in out["policy_timing"])
    assert out["broker_calls"] == 3 and out["broker_steps"] == 2 * BROKER_H + 1 and out["broker_rows_match"]
    assert out["step_shape"] == [14]
    assert {"frame", "text"} <= set(out["extra_keys"])  # the robot's text beside its actions
    assert set(out["text"]) <= {"language", "memory"}


def test_invalid_observation_error_path(served) -> None:
    out = run_client(client_python("0.1.2"), "error", str(served.port))
    assert "unknown cameras ['cam_top']" in out["error"] and "cam_left_wrist" in out["error"]
    assert out["next"] == "ConnectionClosedError" and out["next_code"] == 1011
    assert out["next_reason"] == "Internal server error. Traceback included in previous frame."
    assert out["other_shape"] == [H, 14]


@pytest.mark.parametrize("kind, says", [
    ("nan_state", "state: holds NaN"), ("short_state", "state: expected 14 values, got shape [9]"),
    ("float_state_str", "state: expected a numeric array"), ("huge_image", "4000x100 pixels"),
    ("gray_image", "expected a CHW image with 3 channels"), ("no_images", "missing key 'images'"),
    ("object_state", "dtype '|O' is not allowed"), ("short_data", "needs 112 bytes, got 8"), ("not_msgpack", "not msgpack"),
])  # fmt: skip
def test_malformed_requests_are_named(served, kind: str, says: str) -> None:
    out = run_client(client_python("0.1.2"), "bad_request", str(served.port), kind)
    assert out["error"] is not None and says in out["error"], out
    assert run_client(client_python("0.1.2"), "path", str(served.port))["shape"] == [H, 14]  # the server goes on


def test_threads_get_their_own_replies_in_order(served) -> None:
    out = run_client(client_python("0.1.2"), "threads", str(served.port), "3", "4")
    assert out["replies"] == 12
    assert out["distinct"] > 1e-3  # different robots' observations give different chunks
    assert out["max_diff"] < 1e-3  # batched with the others = served alone, up to float rounding


def test_uri_with_path_and_raw_bytes(served) -> None:
    python = client_python("0.1.2")
    assert run_client(python, "path", str(served.port)) == {"metadata": {"reset_pose": [0.0, -0.96, 1.16, 0.0, -0.3, 0.0]},
                                                             "shape": [H, 14]}  # fmt: skip
    out = run_client(python, "raw_bytes", str(served.port))
    assert out["metadata_is_bytes"] and out["top_keys_str"] and out["roundtrip"]
    assert out["marker_keys_bin"] and out["marker_keys"] == ["b'__ndarray__'", "b'data'", "b'dtype'", "b'shape'"]
    assert out["dtype"] == "<f4" and out["shape"] == [H, 14]


def test_a_client_that_ends_after_its_last_reply_is_not_a_lost_connection(served) -> None:
    # openpi's client has no close(): its process ends after the last reply, with no closing handshake
    before = served.log.count("ended by the client after its last reply")
    assert run_client(client_python("0.1.2"), "path", str(served.port))["shape"] == [H, 14]
    deadline = time.monotonic() + 30
    while served.log.count("ended by the client after its last reply") == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert served.log.count("ended by the client after its last reply") > before, served.log[-2000:]
    assert "connection lost" not in served.log  # (the next test's client vanishes mid-request: that one is)


def test_vanished_client_frees_its_robot(served) -> None:
    out = run_client(client_python("0.1.2"), "vanish", str(served.port))
    assert out["shapes"] == [[H, 14]] * 3
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _ in range(50):
        with opener.open(f"http://127.0.0.1:{served.port}/stats", timeout=5) as response:
            stats = json.loads(response.read())
        if stats["connected"] == 0 and stats.get("kv_used_bytes") == 0:
            break
        time.sleep(0.1)
    assert stats["connected"] == 0 and stats["disconnects.abrupt"] >= 1, stats
    assert stats["kv_used_bytes"] == 0 and stats["live_text_requests"] == 0, stats  # the robots' text and KV freed
    assert "connection lost during a request" in served.log


def test_api_key(tmp_path: Path) -> None:
    with oxygen_serve(PARAMS, "--api-key", "s3cret", "--max-clients", "1", log_dir=tmp_path) as s:  # no default prompt
        out = run_client(client_python("0.1.2"), "api_key", str(s.port), "s3cret")
    assert out["none"] == {"raised": "InvalidStatus", "status": 401}
    assert out["wrong"] == {"raised": "InvalidStatus", "status": 401}
    assert out["right"] == {"metadata": {"reset_pose": [0.0, -0.96, 1.16, 0.0, -0.3, 0.0]}}
    assert out["full"] == {"raised": "InvalidStatus", "status": 503}  # --max-clients 1, and one robot is connected


def test_served_during_inference_and_past_a_stalled_client(served) -> None:
    python = client_python("0.1.2")
    out = run_client(python, "busy", str(served.port))
    assert out["health"] == out["handshakes"] == out["pongs"] == 5 and min(out["served"]) > 0, out
    assert run_client(python, "stalled", str(served.port))["shapes"] == [[H, 14]] * 3


def test_question_answered_in_a_later_reply(served) -> None:
    out = run_client(client_python("0.1.2"), "ask", str(served.port))
    request_id = out["asked"]["id"]
    mine = [a for a in out["answers"] if a["id"] == request_id]
    assert mine and mine[-1]["done"] and mine[-1]["question"] == "where is the cube?", out
    assert mine[-1]["frame"] == 0  # forked from the frame that carried the question
    assert "refused" in out["refused"] and "tokens" in out["refused"]["refused"], out


def test_one_at_a_time_serves_each_robot_alone(tmp_path: Path) -> None:
    """openpi's behaviour as a flag: one request per engine tick, so a robot's chunk is exactly its chunk alone."""
    with oxygen_serve(PARAMS, "--one-at-a-time", "--max-clients", "3", "--default-prompt", "Transfer cube",
                      log_dir=tmp_path) as s:  # fmt: skip
        out = run_client(client_python("0.1.2"), "threads", str(s.port), "3", "3")
        log = s.log
    assert out["replies"] == 9 and out["max_diff"] == 0.0 and out["distinct"] > 1e-3, out
    assert "one request at a time" in log
