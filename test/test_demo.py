"""The README's main job end to end (both nodes over DDS, the listener, the GIF and the PNG), here with the tiny
random-weight model and one short episode so it stays fast; the trained policy's skill is test_demo_policy.py's."""

from __future__ import annotations

import re
import subprocess
import sys

from PIL import Image

from ros_helpers import REPO, ros_env, write_params


def test_demo_runs_an_episode_over_dds_and_writes_the_gif_and_the_summary(tmp_path) -> None:  # noqa: ANN001
    policy = tmp_path / "policy.yaml"
    policy.write_text((REPO / "config" / "demo_policy.yaml").read_text()
                      .replace("checkpoint: models/demo", 'checkpoint: ""\n    model_preset: tiny')
                      .replace("tokenizer: models/demo/tokenizer.model", 'tokenizer: ""'))  # fmt: skip
    sim = write_params(tmp_path / "sim.yaml", {"time_limit_s": 4.0, "settle_s": 0.3})  # time for a question (asked at 0.5 s)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "oxygen_ros.demos", "--episodes", "1", "--seed", "12", "--out", str(out),
           "--policy-params", str(policy), "--sim-params", str(sim)]  # fmt: skip
    done = subprocess.run(cmd, env=ros_env(), cwd=REPO, capture_output=True, text=True, timeout=240)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert '=== episode 1: "' in log and "=== episode 1: FAILED" in log and "[narration]" in log, log
    assert "success: 0/1 episodes" in log and "action chunks; median prefill" in log, log
    # a question over ~/ask, judged (an answer that arrives after its episode ended names the episode)
    assert re.search(r"\[asked( in episode 1)?\] where is the ", log) and "answers right in " in log, log
    gif = Image.open(out / "demo_episode.gif")
    assert gif.n_frames >= 10 and gif.size[0] > 300
    reported = re.search(r"demo_episode\.gif \(episode 1, (\d+) frames", log)
    assert reported and int(reported.group(1)) == gif.n_frames, log  # the frames the file holds
    start = log[:log.index('=== episode 1: "')]
    assert "WARN" not in start, start  # the nodes start quietly while they wait for each other
    assert Image.open(out / "demo_summary.png").size[0] > 600


def test_demo_refuses_to_run_outside_the_network_rule(tmp_path) -> None:  # noqa: ANN001
    env = {k: v for k, v in ros_env().items() if k != "ROS_AUTOMATIC_DISCOVERY_RANGE"}
    done = subprocess.run([sys.executable, "-m", "oxygen_ros.demos"], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "scripts/demo.sh" in done.stderr
