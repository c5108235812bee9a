"""Checks run by openpi's real client (PyPI openpi-client, numpy < 2) against a running oxygen-serve.

Runs in the client's own venv (``openpi_client_env.client_python``), not in the project's: it imports only
openpi_client's public classes (plus msgpack and websockets, which openpi-client installs, for the byte-level
and disconnect checks). Usage: ``python openpi_client_checks.py <check> <port> [args]``; prints one JSON line.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import msgpack
import numpy as np
import websockets.sync.client
from openpi_client import msgpack_numpy
from openpi_client.action_chunk_broker import ActionChunkBroker
from openpi_client.base_policy import BasePolicy
from openpi_client.websocket_client_policy import WebsocketClientPolicy


def aloha_obs(seed: int, size: int = 96) -> dict:
    """openpi's ALOHA client keys: state (14, float64), CHW uint8 images, no prompt."""
    rng = np.random.default_rng(seed)
    cams = ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")
    return {"state": rng.uniform(-0.5, 0.5, 14), "images": {c: rng.integers(0, 256, (3, size, size), dtype=np.uint8) for c in cams}}


class Counting(BasePolicy):
    def __init__(self, policy: BasePolicy) -> None:
        self.policy, self.calls, self.chunks = policy, 0, []

    def infer(self, obs: dict) -> dict:
        self.calls += 1
        out = self.policy.infer(obs)
        self.chunks.append(out["actions"])
        return out


def basics(port: int, horizon: int) -> dict:
    policy = WebsocketClientPolicy("127.0.0.1", port)
    replies = [policy.infer(aloha_obs(i)) for i in range(3)]
    counting = Counting(policy)
    broker = ActionChunkBroker(counting, horizon)
    steps = [broker.infer(aloha_obs(10 + i))["actions"] for i in range(2 * horizon + 1)]
    same_rows = all(np.array_equal(steps[i], counting.chunks[i // horizon][i % horizon]) for i in range(len(steps)))
    return {
        "metadata": policy.get_server_metadata(),
        "shapes": [list(r["actions"].shape) for r in replies], "dtypes": [r["actions"].dtype.str for r in replies],
        "server_timing": [r["server_timing"] for r in replies], "policy_timing": [r["policy_timing"] for r in replies],
        "extra_keys": sorted(set(replies[-1]) - {"actions", "server_timing", "policy_timing"}),
        "text": replies[-1].get("text"), "broker_calls": counting.calls, "broker_steps": len(steps),
        "broker_rows_match": bool(same_rows), "step_shape": list(steps[0].shape),
    }  # fmt: skip


def error(port: int) -> dict:
    bad, other = WebsocketClientPolicy("127.0.0.1", port), WebsocketClientPolicy("127.0.0.1", port)
    bad.infer(aloha_obs(0))
    out: dict = {}
    obs = aloha_obs(1)
    obs["images"]["cam_top"] = obs["images"].pop("cam_high")
    try:
        bad.infer(obs)
    except RuntimeError as exc:
        out["error"] = str(exc)
    try:
        bad.infer(aloha_obs(2))
    except Exception as exc:  # noqa: BLE001 - the class is what the check reports
        out["next"] = type(exc).__name__
        out["next_code"] = getattr(getattr(exc, "rcvd", None), "code", None)
        out["next_reason"] = getattr(getattr(exc, "rcvd", None), "reason", None)
    out["other_shape"] = list(other.infer(aloha_obs(3))["actions"].shape)
    return out


def bad_request(port: int, kind: str) -> dict:
    """One malformed request of ``kind``; the error text the client raises (and that the server goes on)."""
    policy = WebsocketClientPolicy("127.0.0.1", port)
    obs = aloha_obs(0)
    if kind == "nan_state":
        obs["state"][3] = np.nan
    elif kind == "short_state":
        obs["state"] = obs["state"][:9]
    elif kind == "float_state_str":
        obs["state"] = "zero"
    elif kind == "huge_image":
        obs["images"]["cam_high"] = np.zeros((3, 4000, 100), np.uint8)
    elif kind == "gray_image":
        obs["images"]["cam_high"] = np.zeros((96, 96), np.uint8)
    elif kind == "no_images":
        del obs["images"]
    raw = {"not_msgpack": b"\xc1\xc1 not msgpack",  # the client never sends these: written by hand
           "object_state": msgpack.packb({"state": {b"__ndarray__": True, b"data": b"\x80" * 8, b"dtype": "|O", b"shape": [1]}}),
           "short_data": msgpack.packb({"state": {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "<f8", b"shape": [14]}})}
    try:
        if kind in raw:
            policy._ws.send(raw[kind])  # the client has no public way to send raw bytes
            reply = policy._ws.recv()
            raise RuntimeError(f"Error in inference server:\n{reply}") if isinstance(reply, str) else AssertionError(reply)
        policy.infer(obs)
        return {"error": None}
    except RuntimeError as exc:
        return {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001
        return {"error": None, "raised": f"{type(exc).__name__}: {exc}"}


def api_key(port: int, key: str) -> dict:
    """Without, with a wrong and with the right key; then one more robot than a one-robot server serves."""
    out, held = {}, []
    for name, given in (("none", None), ("wrong", key + "x"), ("right", key), ("full", key)):
        try:
            held.append(WebsocketClientPolicy("127.0.0.1", port, api_key=given))
            out[name] = {"metadata": held[-1].get_server_metadata()}
        except Exception as exc:  # noqa: BLE001
            out[name] = {"raised": type(exc).__name__, "status": getattr(getattr(exc, "response", None), "status_code", None)}
    return out


def threads(port: int, n: int, k: int) -> dict:
    """N connections (opened in order: robots 0..N-1) each sending k requests: first all at once, then one
    connection after the other alone. Each reply must be its own request's (same actions up to rounding)."""

    def run(together: bool) -> list[list[np.ndarray]]:
        policies = [WebsocketClientPolicy("127.0.0.1", port) for _ in range(n)]
        results: list[list[np.ndarray]] = [[] for _ in range(n)]
        frames: list[list[int]] = [[] for _ in range(n)]

        def client(i: int) -> None:
            for j in range(k):
                reply = policies[i].infer(aloha_obs(100 * i + j))
                results[i].append(reply["actions"])
                frames[i].append(reply["frame"])

        if together:
            workers = [threading.Thread(target=client, args=(i,)) for i in range(n)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        else:
            for i in range(n):
                client(i)
        for p in policies:
            p._ws.close()  # the client has no close(); a robot's process would simply exit
        assert all(f == list(range(k)) for f in frames), frames
        return results

    together = run(True)
    time.sleep(1.0)  # the server frees the robots of the closed connections
    alone = run(False)
    diffs = [float(np.max(np.abs(a - b))) for ta, tb in zip(together, alone) for a, b in zip(ta, tb)]
    distinct = float(np.max(np.abs(together[0][0] - together[1][0]))) if n > 1 else 0.0
    return {"max_diff": max(diffs), "replies": sum(len(r) for r in together), "distinct": distinct}


def path(port: int) -> dict:
    policy = WebsocketClientPolicy(f"ws://127.0.0.1:{port}/some/path", None)
    return {"metadata": policy.get_server_metadata(), "shape": list(policy.infer(aloha_obs(0))["actions"].shape)}


def vanish(port: int) -> dict:
    """A client that sends a request and disappears before the reply; another client is served meanwhile."""
    uri = f"ws://127.0.0.1:{port}"
    with websockets.sync.client.connect(uri, compression=None, max_size=None) as raw:
        raw.recv()
        other = WebsocketClientPolicy("127.0.0.1", port)
        raw.send(msgpack_numpy.packb(aloha_obs(0)))
        raw.socket.close()  # gone without a closing handshake
    t0 = time.monotonic()
    shapes = [list(other.infer(aloha_obs(i))["actions"].shape) for i in range(3)]
    return {"shapes": shapes, "seconds": time.monotonic() - t0}


def busy(port: int) -> dict:
    """While two robots keep the engine busy: health checks, new handshakes and pings are answered."""
    import urllib.request

    stop = threading.Event()
    served = [0, 0]

    def robot(i: int) -> None:
        policy = WebsocketClientPolicy("127.0.0.1", port)
        while not stop.is_set():
            policy.infer(aloha_obs(i))
            served[i] += 1

    workers = [threading.Thread(target=robot, args=(i,)) for i in range(2)]
    for w in workers:
        w.start()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    health, handshakes, pongs = 0, 0, 0
    try:
        time.sleep(0.5)
        for _ in range(5):
            with opener.open(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                health += response.read() == b"OK\n"
            with websockets.sync.client.connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None,
                                                open_timeout=5) as conn:  # fmt: skip
                handshakes += isinstance(conn.recv(timeout=5), bytes)
                pongs += conn.ping().wait(5)
    finally:
        stop.set()
        for w in workers:
            w.join()
    return {"health": health, "handshakes": handshakes, "pongs": pongs, "served": served}


def stalled(port: int) -> dict:
    """A client that stops in the middle of a frame (its header promises 1 MB) does not hold up another."""
    import socket

    with websockets.sync.client.connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None) as stuck:
        stuck.recv()
        sock: socket.socket = stuck.socket
        sock.sendall(bytes([0x82, 0xFF]) + (1 << 20).to_bytes(8, "big") + b"\0\0\0\0" + b"x" * 1000)  # masked binary frame
        other = WebsocketClientPolicy("127.0.0.1", port)
        shapes = [list(other.infer(aloha_obs(i))["actions"].shape) for i in range(3)]
        sock.close()
    return {"shapes": shapes}


def ask(port: int) -> dict:
    """A request's question: accepted at once ("asked"), answered in later replies ("answers")."""
    policy = WebsocketClientPolicy("127.0.0.1", port)
    obs = aloha_obs(0)
    obs["ask"] = "where is the cube?"
    first = policy.infer(obs)
    answers = []
    for i in range(12):
        reply = policy.infer(aloha_obs(i + 1))
        answers += reply.get("answers", [])
        if any(a["done"] for a in answers):
            break
    refused = policy.infer({**aloha_obs(20), "ask": "cube " * 90})  # too long for a prompt: refused, not an error
    return {"asked": first.get("asked"), "answers": answers, "refused": refused.get("asked")}


def raw_bytes(port: int) -> dict:
    with websockets.sync.client.connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None) as conn:
        first = conn.recv()
        conn.send(msgpack_numpy.packb(aloha_obs(0)))
        reply = conn.recv()
    raw = msgpack.unpackb(reply, raw=False)
    actions = raw["actions"]
    decoded = msgpack_numpy.unpackb(reply)
    return {
        "metadata_is_bytes": isinstance(first, bytes), "metadata": msgpack.unpackb(first, raw=False),
        "top_keys_str": all(isinstance(key, str) for key in raw),
        "marker_keys": sorted(repr(key) for key in actions), "marker_keys_bin": all(isinstance(key, bytes) for key in actions),
        "dtype": actions[b"dtype"], "shape": list(actions[b"shape"]),
        "roundtrip": bool(np.array_equal(msgpack_numpy.unpackb(msgpack_numpy.packb(decoded))["actions"], decoded["actions"])),
    }  # fmt: skip


def infer_file(port: int, obs_path: str, out_path: str) -> dict:
    """The observation saved in ``obs_path`` (npz: flat keys, images.<cam> for ALOHA) → actions into ``out_path``."""
    data = dict(np.load(obs_path, allow_pickle=False))
    obs: dict = {}
    for key, value in data.items():
        if key.startswith("images."):
            obs.setdefault("images", {})[key.split(".", 1)[1]] = value
        elif key == "prompt":
            obs["prompt"] = str(value)
        else:
            obs[key] = value
    policy = WebsocketClientPolicy("127.0.0.1", port)
    actions = policy.infer(obs)["actions"]
    np.save(out_path, actions)
    return {"shape": list(actions.shape), "dtype": actions.dtype.str}


CHECKS = {"basics": basics, "error": error, "bad_request": bad_request, "api_key": api_key, "threads": threads,
          "path": path, "vanish": vanish, "raw_bytes": raw_bytes, "infer_file": infer_file, "busy": busy, "stalled": stalled,
          "ask": ask}  # fmt: skip

if __name__ == "__main__":
    check, port, *rest = sys.argv[1:]
    args = [int(a) if a.isdigit() else a for a in rest]
    print(json.dumps(CHECKS[check](int(port), *args), default=str))
