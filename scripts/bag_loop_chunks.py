"""Chunks per loop of a looped bag: the user's commands, counted by a subscriber.

    bash scripts/in_netns.sh .venv/bin/python scripts/bag_loop_chunks.py --loops 6 --replan n_action_steps

It makes the 5 s demo bag (`oxygen-replay make-demo`), starts `oxygen_node --params-file config/demo.yaml -p
use_sim_time:=true -p replan:=<mode> -p n_action_steps:=2`, plays the bag with `oxygen-replay play --loop`,
and counts the node's ActionChunks per loop (a loop starts where /clock goes back) and the wall time from each
jump back to the first chunk after it. Prints one line per loop and a JSON summary. DDS stays on loopback:
run it through scripts/in_netns.sh.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", type=int, default=6, help="loops of the bag to count (default 6)")
    parser.add_argument("--replan", choices=("tick", "n_action_steps"), default="n_action_steps")
    parser.add_argument("--n-action-steps", type=int, default=2)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of bag (default 5)")
    args = parser.parse_args()
    if os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") != "LOCALHOST":
        print("run through scripts/in_netns.sh (DDS must stay on loopback)", file=sys.stderr)
        return 2

    import rclpy
    from oxygen_ros_msgs.msg import ActionChunk
    from rosgraph_msgs.msg import Clock

    folder = Path(tempfile.mkdtemp(prefix="bag_loop_"))
    bag = folder / "demo.mcap"
    config = REPO / "config" / "demo.yaml"
    subprocess.run([sys.executable, "-m", "oxygen_ros.replay.cli", "make-demo", str(bag), "--duration", str(args.duration),
                    "--params-file", str(config), "--quiet"], check=True, cwd=REPO)  # fmt: skip
    rclpy.init()
    node = rclpy.create_node("bag_loop_counter")
    loop_of_clock = {"loop": 0, "last_ns": None, "jumped_at": None}
    counts: list[int] = [0]
    first_after_jump: list[float | None] = [None]

    def on_clock(msg: Clock) -> None:
        ns = msg.clock.sec * 1_000_000_000 + msg.clock.nanosec
        last = loop_of_clock["last_ns"]
        if last is not None and ns < last:  # the bag started again
            loop_of_clock["loop"] += 1
            loop_of_clock["jumped_at"] = time.monotonic()
            counts.append(0)
            first_after_jump.append(None)
        loop_of_clock["last_ns"] = ns

    def on_chunk(msg: ActionChunk) -> None:
        loop = loop_of_clock["loop"]
        counts[loop] += 1
        jumped = loop_of_clock["jumped_at"]
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        new_timeline = stamp <= (loop_of_clock["last_ns"] or 0)  # not a chunk of the loop before, still on its way
        if jumped is not None and first_after_jump[loop] is None and new_timeline:
            first_after_jump[loop] = time.monotonic() - jumped

    node.create_subscription(Clock, "/clock", on_clock, 100)
    node.create_subscription(ActionChunk, "/oxygen_node/action_chunk", on_chunk, 50)
    log = open(folder / "node.log", "wb")
    node_cmd = [sys.executable, "-m", "oxygen_ros.ros.main", "--params-file", str(config), "--ros-args", "-p",
                "use_sim_time:=true", "-p", f"replan:={args.replan}", "-p", f"n_action_steps:={args.n_action_steps}"]
    proc = subprocess.Popen(node_cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    player = None
    try:
        deadline = time.monotonic() + 120
        while node.count_publishers("/oxygen_node/action_chunk") == 0 and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.1)
        player = subprocess.Popen([sys.executable, "-m", "oxygen_ros.replay.cli", "play", str(bag), "--loop",
                                   "--wait-for-subscribers", "20", "--quiet"], cwd=REPO)  # fmt: skip
        while loop_of_clock["loop"] < args.loops and player.poll() is None and proc.poll() is None:
            rclpy.spin_once(node, timeout_sec=0.05)
    finally:
        for p in (player, proc):
            if p is not None and p.poll() is None:
                p.send_signal(2)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
        node.destroy_node()
        rclpy.try_shutdown()
        log.close()
    complete = counts[: args.loops]  # the last loop was cut short
    for i, n in enumerate(complete):
        after = first_after_jump[i]
        print(f"loop {i + 1}: {n} chunks" + (f", first chunk {after:.3f} s after /clock went back" if after is not None else ""))
    print(json.dumps({"replan": args.replan, "chunks_per_loop": complete,
                      "first_chunk_after_jump_s": [None if t is None else round(t, 3) for t in first_after_jump[1 : args.loops]],
                      "node_log": str(folder / "node.log")}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
