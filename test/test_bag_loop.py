"""A looped bag over real DDS, as a user runs it: `oxygen-replay play --loop` of a short demo bag into
`oxygen_node --params-file config/demo.yaml -p use_sim_time:=true` (scripts/bag_loop_chunks.py, which counts the
chunks per loop with a subscriber). /clock goes back at every loop; the node keeps acting in every loop, in both
replan modes, and logs one line per jump."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ros_helpers import REPO, ros_env

BAG_S = 2.0
LOOPS = 4
CONTROL_HZ = 5.0  # config/demo.yaml


@pytest.mark.parametrize("replan", ["tick", "n_action_steps"])
def test_every_loop_of_a_looped_bag_gets_its_chunks(replan: str) -> None:
    cmd = [sys.executable, str(REPO / "scripts" / "bag_loop_chunks.py"), "--loops", str(LOOPS), "--replan", replan,
           "--duration", str(BAG_S)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=ros_env(), cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    counts, resumed = summary["chunks_per_loop"], summary["first_chunk_after_jump_s"]
    log = open(summary["node_log"]).read()
    per_loop = BAG_S * CONTROL_HZ / (1 if replan == "tick" else 2)  # n_action_steps 2: a chunk every 2 steps
    assert len(counts) == LOOPS, done.stdout
    # Every loop, not only the first, gets its chunks (a busy 2-core machine may lose a tick or two).
    assert all(n >= 0.6 * per_loop for n in counts), (counts, per_loop, log[-3000:])
    assert all(t is not None and t < 1.0 for t in resumed), (resumed, log[-3000:])
    jumps = [line for line in log.splitlines() if "clock jumped back" in line and "restarted the timing" in line]
    assert len(jumps) >= LOOPS - 1, log[-3000:]
    assert "[ERROR]" not in log, log[-3000:]
