"""`scripts/demo.sh --robot aloha` end to end: oxygen_node and the MuJoCo ALOHA's oxygen_sim_node, each in its own
process over DDS on loopback, the demo's listener printing the judged texts and writing the GIF and the JSON;
here with a small random-weight ALOHA-shaped checkpoint and one short episode so it stays fast (the trained
policy's skill is oxygen-sim eval's to measure)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import yaml
from PIL import Image

from aloha_available import require_aloha

require_aloha()

from oxygen_ros.sim.aloha import scene_texts  # noqa: E402
from oxygen_ros.sim.aloha.checkpoint import write_small_checkpoint  # noqa: E402
from oxygen_ros.sim.aloha.physics import AlohaPhysics  # noqa: E402

from ros_helpers import REPO, ros_env, write_params  # noqa: E402

SEED = 3
MARK = r"(✓|✗ \(true: (?P<truth>[^)]+)\))"  # how the printout marks a text against the simulator's truth


def _params(name: str, **changes: object) -> dict:
    params = yaml.safe_load((REPO / "config" / name).read_text())["/**"]["ros__parameters"]
    return {**params, **changes}


def test_aloha_demo_prints_judged_texts_and_answers_and_writes_the_gif(tmp_path) -> None:  # noqa: ANN001
    checkpoint, tokenizer = write_small_checkpoint(tmp_path / "model")
    # without the output limits: the guard refuses a random model's chunks (docs/safety.md tests it)
    unguarded = {f"limit_{name}": [] for name in ("joints", "max_velocity", "max_distance", "lower", "upper")}
    policy = write_params(tmp_path / "policy.yaml", _params("aloha_demo.yaml", checkpoint=str(checkpoint), tokenizer=str(tokenizer),
                                                            **unguarded))  # fmt: skip
    # 350 steps (7 s): both questions are asked (at 1.0 s, and at 6.0 s as a random model never holds the cube)
    # and answered from frames of the episode
    sim = write_params(tmp_path / "sim.yaml", _params("aloha_demo_sim.yaml", episode_steps=350))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "oxygen_ros.demos", "--robot", "aloha", "--episodes", "1", "--seed", str(SEED),
           "--out", str(out), "--policy-params", str(policy), "--sim-params", str(sim)]  # fmt: skip
    done = subprocess.run(cmd, env=ros_env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert f'=== episode 1: "Transfer cube" (scene seed {SEED})' in log, log
    assert re.search(r"=== episode 1: (SUCCESS: handed over at step \d+|FAILED: no hand-over in 350 steps)", log), log

    # Narration: every new text printed with its mark; the arms start away from the cube, so the first frame's truth
    # is the reach (a random-weight model names no phase).
    narration = [m.group("truth") or m.group(1) for m in re.finditer(rf"\[narration\] (.*?)  {MARK}", log)]
    assert narration and narration[0] == scene_texts.PHASES[0], log
    # The memory note of the first frame: where the scene put the cube, from the simulator's physics at that frame.
    start = AlohaPhysics()
    start.reset(SEED)
    memory = re.search(rf"\[memory\] (.*?)  {MARK}", log)
    assert memory, log
    assert (memory.group("truth") or memory.group(1)) == f"cube on the table, {scene_texts.place(scene_texts.cube_position(start))}"
    # Both questions over ~/ask, each answer marked against the truth at the frame it came from.
    for question in scene_texts.QUESTIONS:
        assert re.search(rf"\[asked( in episode 1)?\] {re.escape(question)} → .*  {MARK}", log), log
    assert "answers right in " in log and "action chunks; median prefill" in log, log
    # every answer inside its own episode's block: the end line waits for them
    assert log.index("which arm holds the cube? →") < log.index("=== episode 1: S" if "SUCCESS" in log else "=== episode 1: F")
    assert "source .venv/bin/activate" in log  # where the tools are, after the demo

    gif = Image.open(out / "demo_episode.gif")
    # the three cameras side by side; a frame every 5 steps from the first (the simulator waits for the recorder)
    assert gif.size[0] == 3 * 224 and gif.n_frames >= 40
    assert Image.open(out / "demo_summary.png").size[0] > 600  # true phases against the narration, the joints
    summary = json.loads((out / "demo_summary.json").read_text())
    (episode,) = summary["episodes"]
    assert episode["seed"] == SEED and episode["narration_outputs"] >= len(narration)
    assert len(episode["answers"]) == 2 and all(a["truth"] for a in episode["answers"])
    assert [a["question"] for a in episode["answers"]] == ["where is the cube?", "which arm holds the cube?"]
    assert summary["action_chunks"] >= 7  # a chunk every 25 steps


def test_aloha_demo_refuses_an_unknown_robot_and_a_missing_params_file() -> None:
    done = subprocess.run([sys.executable, "-m", "oxygen_ros.demos", "--robot", "ur5"], env=ros_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "--robot" in done.stderr and "aloha" in done.stderr
    done = subprocess.run([sys.executable, "-m", "oxygen_ros.demos", "--robot", "aloha", "--policy-params", "no/such.yaml"],
                          env=ros_env(), cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "argument --policy-params: no such file: no/such.yaml" in done.stderr, done.stderr
