"""oxygen-serve (a real server process, the committed ALOHA policy) against hostile frames and headers from a real
websocket client: expansion and nesting bombs are refused while /healthz keeps answering and the memory stays
put, repeated Authorization headers get 401, a frame over --max-message-bytes is counted as a refusal."""

from __future__ import annotations

import http.client
import json
import time
import urllib.request
from collections.abc import Iterator

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from oxygen_ros.serve.bench import sample_observation
from oxygen_ros.serve.codec import pack, unpack
from oxygen_ros.serve.frame_bench import BOMB_BYTES, HealthProbe, flat_bomb, nested_bomb, rss_bytes
from openpi_client_env import REPO, Served, oxygen_serve

PARAMS = REPO / "config" / "aloha_demo.yaml"
KEY = "s3cret"
AUTH = {"Authorization": f"Api-Key {KEY}"}
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the server's default
OPENPI_CLOSE_REASON = "Internal server error. Traceback included in previous frame."
HEALTH_DEADLINE_S = 0.25
RSS_GROWTH_LIMIT = 100 * 1024 * 1024


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with oxygen_serve(PARAMS, "--api-key", KEY, "--default-prompt", "Transfer cube",
                      log_dir=tmp_path_factory.mktemp("serve")) as s:  # fmt: skip
        yield s


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _stats(served: Served) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{served.port}/stats", headers=AUTH)
    with _opener().open(request, timeout=10) as response:
        return json.loads(response.read())


def _client(served: Served) -> ClientConnection:
    ws = connect(f"ws://127.0.0.1:{served.port}", additional_headers=AUTH, max_size=None, compression=None,
                 open_timeout=30, proxy=None)  # fmt: skip
    assert unpack(ws.recv(timeout=30)) == {"reset_pose": [0.0, -0.96, 1.16, 0.0, -0.3, 0.0]}
    return ws


def _served_a_chunk(served: Served) -> None:
    with _client(served) as ws:
        ws.send(pack(sample_observation("aloha", 0)))
        assert unpack(ws.recv(timeout=120))["actions"].shape == (50, 14)


def _refusal(served: Served, frame: bytes) -> str:
    """Send one frame; the server's text frame, after checking openpi's error close that follows it."""
    with _client(served) as ws:
        ws.send(frame)
        text = ws.recv(timeout=60)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=60)
    assert isinstance(text, str)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011, closed.value
    assert closed.value.rcvd.reason == OPENPI_CLOSE_REASON
    return text


def _in_map(payload: bytes) -> bytes:
    return b"\x81\xa1x" + payload  # {"x": payload}: an observation map with one key


def test_expansion_bombs_are_refused_while_health_answers_and_memory_stays(served: Served) -> None:
    flat, nested = flat_bomb(), nested_bomb()
    assert len(flat) > BOMB_BYTES and len(nested) > BOMB_BYTES  # 15 MiB each
    _served_a_chunk(served)  # the model's first run grows the process; measure from after it
    start_rss, before = rss_bytes(served.process.pid), _stats(served)
    with HealthProbe(served.port) as probe:
        texts = [_refusal(served, bomb) for bomb in (flat, nested, flat, nested)]
        probe.wait_answers(max(5, 20 - probe.answered))  # a few after the last one, and 20 in all (fast refusals)
    grown = rss_bytes(served.process.pid) - start_rss
    assert "declares an array of 15728640 items; this server accepts at most 1024" in texts[0], texts[0]
    assert "more than 16384 map entries and array items" in texts[1], texts[1]
    assert texts[2] == texts[0] and texts[3] == texts[1]
    assert len(probe.latencies) >= 20 and max(probe.latencies) < HEALTH_DEADLINE_S, sorted(probe.latencies)[-5:]
    assert grown < RSS_GROWTH_LIMIT, f"RSS grew by {grown / 2**20:.0f} MiB"
    after = _stats(served)
    assert after.get("refused.frame_bounds", 0) - before.get("refused.frame_bounds", 0) == 4, after
    assert after.get("errors.server", 0) == before.get("errors.server", 0)
    assert served.log.count("refused: the request") >= 4
    _served_a_chunk(served)  # and the server goes on


@pytest.mark.parametrize("levels", [17, 1 << 20])  # just past the bound; far past msgpack's own stack
def test_nesting_bomb_is_refused(served: Served, levels: int) -> None:
    before = _stats(served).get("refused.frame_bounds", 0)
    text = _refusal(served, _in_map(b"\x91" * levels + b"\xc0"))
    assert "nests maps and arrays deeper than 16 levels" in text, text
    assert _stats(served)["refused.frame_bounds"] == before + 1


def _handshake_status(port: int, headers: list[tuple[str, bytes | str]]) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest("GET", "/", skip_accept_encoding=True)
        upgrade = [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "13"),
                   ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]  # fmt: skip
        for name, value in upgrade + headers:
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace") if response.status != 101 else ""
    finally:
        conn.close()


def test_repeated_or_undecodable_authorization_gets_401(served: Served) -> None:
    right = AUTH["Authorization"]
    assert _handshake_status(served.port, [("Authorization", right)])[0] == 101
    status, body = _handshake_status(served.port, [("Authorization", right), ("Authorization", right)])
    assert status == 401 and "repeated" in body, body
    assert _handshake_status(served.port, [("Authorization", right), ("Authorization", "Api-Key wrong")])[0] == 401
    assert _handshake_status(served.port, [("Authorization", b"Api-Key s3cr\xe9t")])[0] == 401
    assert "Traceback" not in served.log and "MultipleValuesError" not in served.log, served.log[-3000:]


def test_frame_over_max_message_bytes_is_counted_as_a_refusal(served: Served) -> None:
    before = _stats(served)
    with _client(served) as ws:
        try:
            ws.send(b"\0" * (MAX_MESSAGE_BYTES + 1))
            ws.recv(timeout=60)
        except (ConnectionClosed, OSError):
            pass
        assert ws.close_code == 1009, ws.close_code
    deadline = time.monotonic() + 30
    while _stats(served).get("refused.too_big", 0) == before.get("refused.too_big", 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    after = _stats(served)
    assert after.get("refused.too_big", 0) == before.get("refused.too_big", 0) + 1, after
    assert after.get("disconnects.abrupt", 0) == before.get("disconnects.abrupt", 0), after
    assert f"exceeds limit of {MAX_MESSAGE_BYTES} bytes (--max-message-bytes), closed with 1009" in served.log
