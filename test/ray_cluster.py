"""A real Ray cluster for the tests: ``ray start --head`` and a second ``ray start --address`` as separate
processes on 127.0.0.1 (a second raylet standing for a second machine), one CPU each, token authentication on;
`cluster` is a module-scoped fixture giving its address."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).parent / "ray"
# Ray's token authentication, as a cluster should run: every node and driver of the test's cluster holds the token
RAY_ENV = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "PYTHONPATH": str(REPO)}
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _ray_node(args: list[str], log: Path) -> Iterator[subprocess.Popen]:
    """``ray start ... --block`` in a process group of its own (its raylet and workers with it), ended by that
    group's id."""
    with open(log, "w") as out:
        proc = subprocess.Popen([str(RAY), "start", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                                 "--object-store-memory=80000000", "--disable-usage-stats", *args],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=RAY_ENV)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while "Ray runtime started" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        yield proc
    finally:
        for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait_s)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue


def _ask_cluster(address: str, expression: str) -> float:
    """A number about the cluster, from a driver of its own (0 where it cannot say)."""
    code = f"import ray; ray.init(address={address!r}, log_to_driver=False); print(float({expression}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=RAY_ENV)
    return float(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else 0.0


def alive_nodes(address: str) -> int:
    return int(_ask_cluster(address, "sum(n['Alive'] for n in ray.nodes())"))


def free_cpus(address: str) -> float:
    return _ask_cluster(address, "ray.available_resources().get('CPU', 0)")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    port = _free_port()
    address = f"127.0.0.1:{port}"
    # a short folder: Ray's unix sockets live under it
    with tempfile.TemporaryDirectory(prefix="ray", dir="/tmp") as temp, ExitStack() as stack:
        logs = Path(temp)
        stack.enter_context(_ray_node(["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}/t"],
                                      logs / "head.log"))  # fmt: skip
        stack.enter_context(_ray_node([f"--address={address}"], logs / "second.log"))
        deadline = time.monotonic() + 120
        while alive_nodes(address) < 2:
            assert time.monotonic() < deadline, "the second Ray node never joined"
            time.sleep(1)
        yield address


