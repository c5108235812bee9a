"""Hostile-frame benchmark of oxygen-serve: expansion bombs sent while ``/healthz`` is polled back to back.

    python -m oxygen_ros.serve.frame_bench --params-file config/aloha_demo.yaml --rounds 15

One client sends ``--rounds`` pairs of 15 MiB bombs (one byte per empty map: a flat array of them, and the
same bytes as nested arrays that pass every length bound), each on its own connection, and reads the
server's refusal; a thread asks ``/healthz`` meanwhile, and as long again afterwards with nothing sent (the
machine's own jitter, for comparison). Prints the time to refuse them, the health answers' latency (p50, max)
in both phases and the server's resident memory before and after the bombs (``/proc/<pid>/status``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from websockets.sync.client import connect

from .bench import sample_observation, server_process
from .codec import pack, unpack

BOMB_BYTES = 15 * 1024 * 1024


def flat_bomb(n: int = BOMB_BYTES) -> bytes:
    """A msgpack array of ``n`` empty maps (``n`` + 5 bytes; about 64 n bytes of Python objects once decoded)."""
    return b"\xdd" + n.to_bytes(4, "big") + b"\x80" * n


def nested_bomb(n: int = BOMB_BYTES) -> bytes:
    """``{"x": [...]}`` of about ``n`` bytes of empty maps in arrays of 1024 of arrays of 1024 (every length is
    within the server's bounds; the total is not)."""
    inner = b"\xdc\x04\x00" + (b"\xdc\x04\x00" + b"\x80" * 1024) * 1024
    count = min(15, max(1, round(n / len(inner))))  # a msgpack fixarray holds at most 15
    return b"\x81\xa1x" + bytes([0x90 + count]) + inner * count


def _probe_health(port: int, stop: Any, answered: Any, out: Any) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    latencies: list[float] = []
    while not stop.is_set():
        start = time.monotonic()
        try:
            with opener.open(f"http://127.0.0.1:{port}/healthz", timeout=30) as response:
                ok = response.read() == b"OK\n"
        except OSError:
            ok = False
        latencies.append(time.monotonic() - start if ok else float("inf"))
        answered.value += 1
        time.sleep(0.01)
    out.put(latencies)


class HealthProbe:
    """GET /healthz back to back (10 ms apart) from a process of its own (so that the prober's own work, such
    as sending a bomb, cannot delay it); ``latencies``: each answer's, in seconds, a failure as infinity."""

    def __init__(self, port: int) -> None:
        ctx = mp.get_context("spawn")
        self._stop, self._out, self._answered = ctx.Event(), ctx.Queue(), ctx.Value("i", 0)
        self._process = ctx.Process(target=_probe_health, args=(port, self._stop, self._answered, self._out),
                                    daemon=True)  # fmt: skip
        self.latencies: list[float] = []

    @property
    def answered(self) -> int:
        return self._answered.value

    def wait_answers(self, n: int, timeout_s: float = 60.0) -> None:
        """Until ``n`` more answers have come (or the deadline)."""
        target, deadline = self.answered + n, time.monotonic() + timeout_s
        while self.answered < target and time.monotonic() < deadline and self._process.is_alive():
            time.sleep(0.01)

    def __enter__(self) -> HealthProbe:
        self._process.start()
        self.wait_answers(1)  # probing before anything is measured
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        try:
            self.latencies = self._out.get(timeout=60)
        finally:
            self._process.join(timeout=30)


def rss_bytes(pid: int) -> int:
    """A process's resident memory (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def send_one(port: int, frame: bytes, headers: dict[str, str] | None = None) -> bytes | str:
    """One frame on a fresh connection; the server's reply (a text frame is its refusal)."""
    with connect(f"ws://127.0.0.1:{port}", additional_headers=headers, max_size=None, compression=None,
                 open_timeout=30, proxy=None) as ws:  # fmt: skip
        ws.recv(timeout=30)  # metadata
        ws.send(frame)
        return ws.recv(timeout=300)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m oxygen_ros.serve.frame_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--params-file", default="config/aloha_demo.yaml")
    p.add_argument("--rounds", type=int, default=15, help="pairs of bombs (flat, nested) sent one after the other")
    args = p.parse_args(argv)
    with server_process(args.params_file, "--default-prompt", "Transfer cube") as (proc, port):
        unpack(send_one(port, pack(sample_observation("aloha", 0))))  # the model's first run, before measuring
        start_rss = rss_bytes(proc.pid)
        bombs = [flat_bomb(), nested_bomb()]
        with HealthProbe(port) as probe:
            start = time.monotonic()
            replies = [send_one(port, bombs[i % 2]) for i in range(2 * args.rounds)]
            took = time.monotonic() - start
            probe.wait_answers(5)
        end_rss = rss_bytes(proc.pid)
        with HealthProbe(port) as baseline:  # the same probe as long, nothing sent: the machine's own jitter
            time.sleep(took)
    refused = sum(isinstance(r, str) and "FrameRefused" in r for r in replies)
    print(f"# oxygen-serve hostile frames: {args.params_file}, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip
    print(f"{len(replies)} bombs of {BOMB_BYTES / 2**20:.0f} MiB: {refused} refused in {took:.2f} s")
    for name, latencies in (("during the bombs", probe.latencies), ("nothing sent", baseline.latencies)):
        lat_ms = np.array(latencies) * 1000
        print(f"/healthz {name:>16}: {len(lat_ms)} answers, p50 {np.median(lat_ms):.1f} ms, max {lat_ms.max():.1f} ms")
    print(f"server RSS: {start_rss / 2**20:.0f} MiB before, {end_rss / 2**20:.0f} MiB after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
