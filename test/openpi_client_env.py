"""openpi's real robot client in its own virtual environment, and oxygen-serve in a subprocess, for the tests.

``openpi-client`` (PyPI 0.1.1, 0.1.2) pins numpy < 2, so it lives in a venv of its own under the user's cache
folder (``$XDG_CACHE_HOME/oxygen_ros/openpi-client/v<version>``), made by scripts/setup.sh (scripts/extra_envs.py);
a test that finds it missing skips, saying to run scripts/setup.sh. Client scripts run in that venv:
``openpi_client_checks.py`` (this folder) with a sub-command.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from extra_env import extra_python

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CHECKS = HERE / "openpi_client_checks.py"
CLIENT_VERSIONS = ("0.1.1", "0.1.2")
LOOPBACK_ENV = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}  # websockets >= 15 honours proxies


def client_python(version: str) -> Path:
    """The Python of the venv holding openpi-client ``version`` (skips the test, saying how to make it, if missing)."""
    return extra_python(f"openpi-client-{version}")


@dataclass
class Served:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def free_python_env() -> dict[str, str]:
    env = {**os.environ, **LOOPBACK_ENV, "PYTHONPATH": str(REPO)}
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


@contextmanager
def oxygen_serve(params_file: Path | str, *args: str, log_dir: Path, start_timeout_s: float = 240.0,
                 protocol: str = "openpi") -> Iterator[Served]:  # fmt: skip
    """``python -m oxygen_ros.serve.cli`` on 127.0.0.1 and a free port; yields once /healthz answers ``OK`` (openpi)
    or the gRPC port is listening (``protocol="lerobot"``)."""
    log_path = log_dir / f"serve_{time.monotonic_ns()}.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "oxygen_ros.serve.cli", "--params-file", str(params_file),
                                    "--protocol", protocol, "--host", "127.0.0.1", "--port", "0", *args],
                                   stdout=log, stderr=subprocess.STDOUT, env=free_python_env(), cwd=REPO)  # fmt: skip
    try:
        port = _wait_listening(process, log_path, start_timeout_s, "ws" if protocol == "openpi" else "grpc")
        served = Served(process, port, log_path)
        if protocol == "openpi":
            _wait_healthy(served)
        yield served
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_listening(process: subprocess.Popen, log_path: Path, timeout_s: float, scheme: str) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = re.search(rf"protocol on {scheme}://127\.0\.0\.1:(\d+)", log_path.read_text(errors="replace"))
        if match:
            return int(match.group(1))
        if process.poll() is not None:
            raise AssertionError(f"oxygen-serve exited with {process.returncode}:\n{log_path.read_text()}")
        time.sleep(0.2)
    raise AssertionError(f"oxygen-serve did not start in {timeout_s} s:\n{log_path.read_text()}")


def _wait_healthy(served: Served) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _ in range(100):
        try:
            with opener.open(f"http://127.0.0.1:{served.port}/healthz", timeout=5) as response:
                if response.status == 200 and response.read() == b"OK\n":
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"/healthz never answered OK\n{served.log}")


def run_client(python: Path, command: str, *args: str, timeout_s: float = 120.0) -> dict:
    """Run one check of ``openpi_client_checks.py`` in the client's venv; returns the JSON it prints last."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(python), str(CHECKS), command, *args], capture_output=True, text=True,
                          timeout=timeout_s, env={**env, **LOOPBACK_ENV})  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"client check {command} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
