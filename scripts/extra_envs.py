"""The virtual environments beside .venv that tests and measurements need, each in its own folder under
``$XDG_CACHE_HOME/oxygen_ros/`` (default ``~/.cache/oxygen_ros/``), shared by every clone on the machine.

scripts/setup.sh makes the ones marked ``on_setup`` before any test runs (outside the tests' loopback-only
network namespace, where PyPI is unreachable): tests never install anything, they look an environment up here
and skip with "run bash scripts/setup.sh" when it is missing. Usage (standard library only, any Python >= 3.10):

    python scripts/extra_envs.py make            # every on_setup environment, quick when nothing changed
    python scripts/extra_envs.py make NAME ...   # these, on_setup or not
    python scripts/extra_envs.py list            # name, state, folder
    python scripts/extra_envs.py path NAME       # its folder

A new environment is one more ``ExtraEnv`` in ``ENVS``: pip requirements, and/or a build script (e.g. sources
built with cmake into the venv, made only where ``only_if`` exists), and a probe. Each folder holds a stamp, the
hash of its spec: with the stamp matching and its Python there it is ready, else it is remade (under a lock, so
clones setting up at once wait for each other); a venv without a stamp whose requirements and probe pass is kept.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import glob
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAMP = ".oxygen_extra_env_stamp"
MAKE_HINT = "run bash scripts/setup.sh"


@dataclass(frozen=True)
class ExtraEnv:
    name: str
    folder: str  # under the cache root
    requirements: tuple[str, ...]  # pip requirement strings (`name` or `name==version`)
    probe: str  # Python run in the environment; it must exit 0 once the environment is usable
    used_by: str  # what needs it (said in `list` and in the skip reason)
    on_setup: bool = True  # made by scripts/setup.sh; False: only on request (`make NAME`)
    only_if: str | None = None  # a repo-relative path that must exist (e.g. sources to build); else not made
    build: str | None = None  # a repo-relative bash script run after pip as `bash SCRIPT FOLDER` (its text is in the stamp)
    python: str | None = None  # the Python version the venv needs ("3.12"); None: the one running this script

    def applies(self) -> bool:
        return self.only_if is None or (REPO / self.only_if).exists()


def _openpi_client(version: str) -> ExtraEnv:
    # openpi-client pins numpy < 2 (a venv of its own); its wheel imports typing_extensions without declaring it.
    return ExtraEnv(
        name=f"openpi-client-{version}",
        folder=f"openpi-client/v{version}",
        requirements=(f"openpi-client=={version}", "typing_extensions"),
        probe="import openpi_client.websocket_client_policy, openpi_client.action_chunk_broker",
        used_by="test_serve_protocol.py, test_serve_equal.py, test_serve_aloha_loop.py",
    )


NO_PYTHON = "this machine has no Python"  # the start of the reason when an environment's Python is not installed


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` on this machine: pythonX.Y on PATH, else pyenv's newest X.Y.*."""
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "--version"], capture_output=True).returncode == 0:  # a pyenv shim may fail
        return found
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"),
                        key=lambda p: [int(n) for n in re.findall(r"\d+", Path(p).parents[1].name)])  # fmt: skip
    return candidates[-1] if candidates else None


ENVS: tuple[ExtraEnv, ...] = (
    _openpi_client("0.1.1"),
    _openpi_client("0.1.2"),
    ExtraEnv(
        name="robosuite-osc",
        folder="robosuite-osc",
        requirements=("robosuite==1.4.1", "mujoco==3.2.3"),  # LIBERO pins robosuite 1.4
        probe="import robosuite",
        used_by="scripts/measure_osc_gain.py (test/fixtures/robosuite_osc_gain.json)",
        on_setup=False,
    ),
    ExtraEnv(
        name="lerobot-0.6.1",
        folder="lerobot/v0.6.1",
        # lerobot 0.6 needs Python 3.12 and pulls PyPI's CUDA torch (~5 GB, ~2.5 min): a venv of its own
        requirements=("lerobot[async]==0.6.1",),
        probe="import grpc, lerobot.async_inference.helpers",  # robot_client writes logs/ into the working folder
        used_by="test_serve_lerobot_client.py (LeRobot's RobotClient against oxygen-serve --protocol lerobot)",
        python="3.12",
    ),
)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "oxygen_ros"


def find(name: str) -> ExtraEnv:
    for env in ENVS:
        if env.name == name:
            return env
    raise KeyError(f"no extra environment {name!r}; known: {', '.join(e.name for e in ENVS)}")


def folder(env: ExtraEnv) -> Path:
    return cache_root() / env.folder


def python_of(env: ExtraEnv) -> Path:
    return folder(env) / "bin" / "python"


def spec_hash(env: ExtraEnv) -> str:
    """What the stamp records: the hash of the spec (a changed requirement, probe or build script remakes it)."""
    spec: dict = {"requirements": env.requirements, "probe": env.probe}
    if env.python:  # only when set: the stamps of the environments made before it stay valid
        spec["python"] = env.python
    if env.build:
        spec["build"] = (REPO / env.build).read_text()
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def problem(env: ExtraEnv) -> str | None:
    """None when ``env`` is ready (its stamp matches this spec), else what is wrong and how to make it."""
    stamp = folder(env) / STAMP
    if env.python and not python_of(env).exists() and find_python(env.python) is None:
        return f"{NO_PYTHON} {env.python} for the {env.name} environment (pyenv install {env.python})"
    if not python_of(env).exists() or not stamp.exists():
        return f"the {env.name} environment is missing ({folder(env)}): {MAKE_HINT}"
    if stamp.read_text().strip() != spec_hash(env):
        return f"the {env.name} environment is out of date ({folder(env)}): {MAKE_HINT}"
    return None


@contextmanager
def _locked(env: ExtraEnv) -> Iterator[None]:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)


def usable(env: ExtraEnv) -> bool:
    """The venv there has every requirement (pinned ones at their version) and its probe passes."""
    if not python_of(env).exists():
        return False
    wanted = {re.match(r"[A-Za-z0-9._-]+", r).group(0): r.split("==", 1)[1] if "==" in r else None
              for r in env.requirements}  # fmt: skip
    check = ("import importlib.metadata as m, json, sys\n"
             f"wanted = json.loads({json.dumps(json.dumps(wanted))})\n"
             "def ok(name, version):\n"
             "    try:\n"
             "        return version is None or m.version(name) == version\n"
             "    except m.PackageNotFoundError:\n"
             "        return False\n"
             "sys.exit(not all(ok(n, v) for n, v in wanted.items()))\n")  # fmt: skip
    try:
        return all(_run([str(python_of(env)), "-c", code], 120).returncode == 0 for code in (check, env.probe))
    except subprocess.TimeoutExpired:
        return False


def _what_failed(done: subprocess.CompletedProcess) -> str:
    """The last ERROR line pip printed, else the last line of output, else the exit status."""
    lines = (done.stderr or done.stdout).strip().splitlines()
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or [f"exit status {done.returncode}"])[-1]


def make(env: ExtraEnv) -> str:
    """Make ``env`` ready; returns what was done ("ready", "kept", "made"). Raises RuntimeError on failure."""
    with _locked(env):
        if problem(env) is None:
            return "ready"
        stamp = folder(env) / STAMP
        # A venv made before stamps existed is kept when it passes; a stale stamp or a build step always remakes.
        if not stamp.exists() and env.build is None and usable(env):
            stamp.write_text(spec_hash(env) + "\n")
            return "kept"
        steps = []
        if env.requirements:
            steps.append(f"pip {' '.join(env.requirements)}")
        if env.build:
            steps.append(f"bash {env.build}")
        print(f"[extra_envs] making the {env.name} environment in {folder(env)} ({', '.join(steps)})", flush=True)
        folder(env).parent.mkdir(parents=True, exist_ok=True)
        without_pip = [] if env.requirements else ["--without-pip"]
        python = find_python(env.python) if env.python else sys.executable
        if python is None:
            raise RuntimeError(f"could not make {env.name}: {NO_PYTHON} {env.python}")
        made = _run([python, "-m", "venv", "--clear", *without_pip, str(folder(env))], 300)
        if made.returncode == 0 and env.requirements:
            made = _run([str(python_of(env)), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                         *env.requirements], 1200)  # fmt: skip
        if made.returncode == 0 and env.build:
            made = _run(["bash", str(REPO / env.build), str(folder(env))], 3600)
        if made.returncode == 0:
            made = _run([str(python_of(env)), "-c", env.probe], 120)
        if made.returncode != 0:
            raise RuntimeError(f"could not make {env.name}: {_what_failed(made)}")
        stamp.write_text(spec_hash(env) + "\n")
        return "made"


def make_all(names: list[str]) -> int:
    """Make the named environments (none named: every on_setup one that applies); one summary line."""
    envs = [find(n) for n in names] if names else [e for e in ENVS if e.on_setup and e.applies()]
    done, failed = [], []
    for env in envs:
        try:
            done.append(f"{env.name} {make(env)}")
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
            failed.append(str(error))
    if done:
        print(f"[extra_envs] environments in {cache_root()}: {', '.join(done)}")
    for message in failed:
        print(f"[extra_envs] WARNING: {message}; the tests that need it will skip saying so", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("make").add_argument("names", nargs="*")
    sub.add_parser("list")
    sub.add_parser("path").add_argument("name")
    args = parser.parse_args(argv)
    try:
        if args.command == "make":
            return make_all(args.names)
        if args.command == "path":
            print(folder(find(args.name)))
            return 0
    except KeyError as error:
        parser.error(error.args[0])
    for env in ENVS:
        state = "not applicable" if not env.applies() else "missing or out of date" if problem(env) else "ready"
        print(f"{env.name:22} {state:24} {folder(env)}  ({'setup' if env.on_setup else 'on request'}: {env.used_by})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
