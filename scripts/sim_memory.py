"""The simulator's memory over many episodes, and its start-up against `episodes`.

    bash scripts/in_netns.sh .venv/bin/python scripts/sim_memory.py --episodes 1000
    bash scripts/in_netns.sh .venv/bin/python scripts/sim_memory.py --startup-only

Runs `oxygen_sim_node` with short episodes (time_limit_s 0.05, settle_s 0: each ends at its time limit, no
policy needed) and prints its resident memory (VmRSS) every 100 episodes.
`--startup-only` starts it with episodes 1,000 and 100,000 and prints the time to its "ready" line and the
memory then. DDS stays on loopback: run it through scripts/in_netns.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_sim(params: dict, log: Path) -> subprocess.Popen:
    args = [sys.executable, "-m", "oxygen_ros.sim_ros.main", "--ros-args"]
    for name, value in params.items():
        args += ["-p", f"{name}:={json.dumps(value)}"]
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO)


def startup(episodes: int, folder: Path) -> tuple[float, float]:
    """Seconds from launch to the "ready" line, and the memory then."""
    log = folder / f"startup_{episodes}.log"
    t0 = time.monotonic()
    proc = start_sim({"episodes": episodes, "exit_when_done": False}, log)
    try:
        while "ready:" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() - t0 > 300:
                raise RuntimeError(log.read_text(errors="replace"))
            time.sleep(0.02)
        return time.monotonic() - t0, rss_mb(proc.pid)
    finally:
        proc.send_signal(2)
        proc.wait(20)


def episodes_memory(episodes: int, folder: Path, publish_clock: bool) -> list[tuple[int, float]]:
    """(episodes ended, RSS MB) every 100 episodes, read from the simulator's "episode N: failed" lines."""
    log = folder / "episodes.log"
    params = {"episodes": episodes, "time_limit_s": 0.05, "settle_s": 0.0, "exit_when_done": False,
              "publish_clock": publish_clock}  # fmt: skip
    proc = start_sim(params, log)
    samples: list[tuple[int, float]] = []
    try:
        for n in range(100, episodes + 1, 100):
            while f"episode {n}: failed" not in log.read_text(errors="replace"):
                if proc.poll() is not None:
                    raise RuntimeError(log.read_text(errors="replace")[-3000:])
                time.sleep(0.05)
            samples.append((n, rss_mb(proc.pid)))
            print(f"{n:5d} episodes: RSS {samples[-1][1]:.1f} MB", flush=True)
    finally:
        proc.send_signal(2)
        proc.wait(20)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--publish-clock", action="store_true", help="the simulator on its own time, /clock published")
    parser.add_argument("--startup-only", action="store_true")
    args = parser.parse_args()
    if os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") != "LOCALHOST":
        print("run through scripts/in_netns.sh (DDS must stay on loopback)", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="sim_memory_"))
    if args.startup_only:
        for n in (1000, 100_000):
            seconds, rss = startup(n, folder)
            print(f"episodes {n}: ready after {seconds:.2f} s, RSS {rss:.1f} MB")
        return 0
    samples = episodes_memory(args.episodes, folder, args.publish_clock)
    if len(samples) >= 2:
        (n0, first), (n1, last) = samples[0], samples[-1]
        print(f"RSS {first:.1f} MB after {n0} episodes, {last:.1f} MB after {n1}: {last - first:+.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
