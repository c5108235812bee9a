"""Fleet benchmark of oxygen-serve: N robots (each its own process and connection) batched through one engine
vs the same engine serving one request at a time (``--one-at-a-time``, openpi's server), side by side.

    python -m oxygen_ros.serve.bench --params-file config/aloha_demo.yaml --clients 1,2,4,8 --seconds 15
    python -m oxygen_ros.serve.bench --protocol lerobot ...   # LeRobot's gRPC protocol (serve/lerobot/bench_client.py)

Both servers run from the start (loopback, free ports); for each fleet size the two are measured in turn,
``--repeats`` times, each mode first as often as the other, so a machine shared with other work loads both alike. Each client sends its next request
as soon as its reply arrives (no think time: the server is the bottleneck) with a fixed observation of the
layout. Prints chunks/s, latency p50/p95 per mode and the ratio batched ÷ one at a time: the mean over the
repeats and the floor (the lowest pair).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
from websockets.sync.client import connect

from .codec import pack, unpack
from .timed_window import WARM_REQUESTS, timed_requests

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def sample_observation(layout: str, seed: int, size: int = 96) -> dict:
    """A fixed observation with openpi's keys for ``layout`` (images of ``size`` pixels)."""
    rng = np.random.default_rng(seed)
    image = lambda chw=False: rng.integers(0, 256, (3, size, size) if chw else (size, size, 3), dtype=np.uint8)  # noqa: E731
    if layout == "aloha":
        cams = ("cam_high", "cam_left_wrist", "cam_right_wrist")
        return {"state": rng.uniform(-0.3, 0.3, 14), "images": {c: image(True) for c in cams}}
    if layout == "droid":
        return {"observation/exterior_image_1_left": image(), "observation/wrist_image_left": image(),
                "observation/joint_position": rng.uniform(-1, 1, 7), "observation/gripper_position": rng.uniform(0, 1, 1),
                "prompt": "pick up the block"}  # fmt: skip
    return {"observation/image": image(), "observation/wrist_image": image(), "observation/state": rng.uniform(-1, 1, 8),
            "prompt": "pick up the block"}  # fmt: skip


def _client(port: int, layout: str, seed: int, start_at: float, seconds: float, out: "mp.Queue") -> None:
    """One openpi client: warm-up requests, then requests back to back from ``start_at`` for ``seconds``."""
    try:
        message = pack(sample_observation(layout, seed))
        with connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None, proxy=None) as ws:
            ws.recv()  # metadata
            for _ in range(WARM_REQUESTS):
                ws.send(message)
                unpack(ws.recv())

            def request() -> None:
                ws.send(message)
                reply = ws.recv()
                if isinstance(reply, str):
                    raise RuntimeError(reply)

            latencies = timed_requests(request, start_at, seconds)
        out.put(latencies)
    except Exception as exc:  # noqa: BLE001 - reported by the parent
        out.put(f"{type(exc).__name__}: {exc}")


def measure(port: int, layout: str, clients: int, seconds: float, client: Callable[..., None] = _client,
            start_s: float = 3.0) -> tuple[float, float, float]:  # fmt: skip
    """(chunks/s, p50 ms, p95 ms) of ``clients`` processes against the server on ``port``; each runs
    ``client(port, layout, seed, start_at, seconds, out)`` and puts its latencies (or its error) on ``out``."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + start_s + 0.5 * clients  # after every process has started and warmed up
    procs = [ctx.Process(target=client, args=(port, layout, 1000 + i, start_at, seconds, out)) for i in range(clients)]
    for p in procs:
        p.start()
    results = [out.get(timeout=start_s + seconds + 120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    failed = [r for r in results if isinstance(r, str)]
    if failed:
        raise RuntimeError(f"a client failed: {failed[0]}")
    latencies = [x for r in results for x in r]
    p50, p95 = np.percentile(latencies, [50, 95])
    return len(latencies) / seconds, float(p50), float(p95)


@contextmanager
def server(params_file: str, *args: str) -> Iterator[int]:
    """oxygen-serve in a subprocess on a free loopback port; yields the port."""
    with server_process(params_file, *args) as (_, port):
        yield port


@contextmanager
def server_process(params_file: str, *args: str) -> Iterator[tuple[subprocess.Popen, int]]:
    """oxygen-serve in a subprocess on a free loopback port; yields the process and the port."""
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    env = {**os.environ, **NO_PROXY}
    proc = subprocess.Popen([sys.executable, "-m", "oxygen_ros.serve.cli", "--params-file", params_file, "--port", "0",
                             "--log-period-s", "3600", *args], stdout=log, stderr=subprocess.STDOUT, env=env)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not (m := re.search(r"protocol on (?:ws|grpc)://127\.0\.0\.1:(\d+)", Path(log.name).read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"oxygen-serve did not start:\n{Path(log.name).read_text()}")
            time.sleep(0.2)
        yield proc, int(m.group(1))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        os.unlink(log.name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m oxygen_ros.serve.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--params-file", default="config/aloha_demo.yaml")
    p.add_argument("--protocol", default="openpi", choices=("openpi", "lerobot"),
                   help="lerobot: RobotClient-shaped gRPC clients (the parameters file's joints and the checkpoint's cameras)")
    p.add_argument("--layout", default="aloha", choices=("aloha", "droid", "libero"))
    p.add_argument("--clients", default="1,2,4,8", help="fleet sizes, comma-separated")
    p.add_argument("--seconds", type=float, default=15.0, help="measured time per fleet size and mode")
    p.add_argument("--repeats", type=int, default=2, help="alternations of the two modes per fleet size")
    p.add_argument("--server-arg", action="append", default=[], help="an extra oxygen-serve argument (repeatable)")
    args = p.parse_args(argv)
    sizes = [int(n) for n in args.clients.split(",")]
    common = ["--protocol", args.protocol, "--max-clients", str(max(sizes)), "--default-prompt", "Transfer cube",
              *args.server_arg]  # fmt: skip
    client, what, start_s = _client, args.layout, 3.0
    if args.protocol == "lerobot":
        from .lerobot.bench_client import lerobot_client, robot_description

        client, what, start_s = lerobot_client, robot_description(args.params_file), 15.0  # grpc's import is slower
        common += ["--idle-release-s", "3"]  # the previous fleet's slots come back before the next one starts
    with ExitStack() as stack:
        batched = stack.enter_context(server(args.params_file, *common))
        single = stack.enter_context(server(args.params_file, *common, "--one-at-a-time"))
        print(f"# oxygen-serve fleet benchmark ({args.protocol}): {args.params_file}, {args.layout if args.protocol == 'openpi' else 'RobotClient-shaped'} observations, {args.seconds:g} s per "
              f"measurement, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip
        print(f"{'clients':>7} {'mode':>14} {'chunks/s':>9} {'p50 ms':>8} {'p95 ms':>8} {'ratio':>6}")
        for n in sizes:
            rates: dict[str, list[float]] = {"batched": [], "one at a time": []}
            for repeat in range(args.repeats):
                pair = [("batched", batched), ("one at a time", single)]
                for mode, port in pair if repeat % 2 == 0 else pair[::-1]:  # each mode goes first as often
                    rate, p50, p95 = measure(port, what, n, args.seconds, client, start_s)
                    rates[mode].append(rate)
                    print(f"{n:>7} {mode:>14} {rate:>9.1f} {p50:>8.0f} {p95:>8.0f}", flush=True)
            ratios = np.divide(rates["batched"], rates["one at a time"])  # each repeat's pair, measured back to back
            print(f"{n:>7} {'':>14} {'':>9} {'':>8} {'':>8} {np.mean(ratios):>5.2f}x  (floor {ratios.min():.2f}x "
                  f"over {len(ratios)} pairs)", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
