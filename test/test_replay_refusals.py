"""The bag tools name every chunk the guard refuses: the shipped demo configuration (config/demo.yaml, the first
example a newcomer runs) writes a trajectory per chunk, and the same model with its actions not normalized into
the arm's ranges is refused chunk by chunk — counted by output, joint and reason in the summary, said in one
line of `oxygen-replay offline`'s and `eval`'s reports and in a warning, each refusal answered by a hold."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from oxygen_ros.replay.bagio import JOINT_TRAJECTORY, BagReader
from oxygen_ros.replay.cli import main

DEMO = Path(__file__).resolve().parents[1] / "config" / "demo.yaml"
TRAJECTORY = "/joint_trajectory_controller/joint_trajectory"
RAW = ["-p", "norm_mode=none", "-p", "norm_stats=\"\""]  # the model's actions as they come out: about N(0, 1.2)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("refusals") / "scene.mcap"
    assert main(["make-demo", str(path), "--params-file", str(DEMO), "--duration", "3.0", "-q"]) == 0
    return path


def offline(bag: Path, name: str, *extra: str, capsys: pytest.CaptureFixture[str]) -> SimpleNamespace:
    out, summary = bag.parent / f"{name}.mcap", bag.parent / f"{name}.json"
    assert main(["offline", str(bag), "-o", str(out), "--params-file", str(DEMO), "--summary", str(summary),
                 "--overwrite", "-q", *extra]) == 0  # fmt: skip
    printed = capsys.readouterr()
    with BagReader(out) as reader:
        trajectories = [reader.deserialize(m) for m in reader.messages([TRAJECTORY]) if m.msgtype == JOINT_TRAJECTORY]
    return SimpleNamespace(summary=json.loads(summary.read_text()), out=printed.out, err=printed.err, trajectories=trajectories)


def test_the_demo_configuration_writes_a_trajectory_per_chunk(bag: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = offline(bag, "demo", capsys=capsys)
    s = run.summary
    assert s["chunks"] >= 5 and s["trajectories"] == s["chunks"]
    assert s["safety"]["refusals"]["chunks"] == 0 and "refused" not in run.err
    assert "guard: no chunk refused" in run.out


def test_refused_chunks_are_counted_said_and_answered_by_a_hold(bag: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = offline(bag, "raw", *RAW, capsys=capsys)
    s = run.summary
    refusals = s["safety"]["refusals"]
    assert refusals["chunks"] == s["chunks"] >= 5  # panda_joint4's range [-3.07, -0.07] lies far from 0
    assert refusals["by_joint"]["trajectory/panda_joint4/out_of_range"] >= 1
    assert all(k.startswith("trajectory/panda_joint") for k in refusals["by_joint"])
    assert "panda_joint4" in refusals["last"] and "beyond its range" in refusals["last"]
    line = next(x for x in run.out.splitlines() if "guard:" in x)
    assert f"{refusals['chunks']} chunks refused (" in line and "panda_joint4 out_of_range x" in line
    assert any("chunks refused" in w for w in s["warnings"]) and "chunks refused" in run.err
    # every refused chunk answered by a hold: a one-point trajectory to where the joints were measured
    assert len(run.trajectories) == s["trajectories"] == s["chunks"]
    assert all(len(t.points) == 1 for t in run.trajectories)
    held = {tuple(t.points[0].positions) for t in run.trajectories}
    assert len(held) == 1  # a repeated hold stays where the first one held


def test_eval_names_the_refusals_too(bag: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = bag.parent / "eval_raw"
    code = main(["eval", str(bag), "--params-file", str(DEMO), "--out", str(out), "--no-plots", "-q", *RAW])
    assert code == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    refusals = summary["safety"]["refusals"]
    assert refusals["chunks"] >= 5 and "trajectory/panda_joint4/out_of_range" in refusals["by_joint"]
    assert f"guard: {refusals['chunks']} chunks refused (" in printed
