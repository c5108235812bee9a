"""``oxygen-replay eval`` on many bags: on a real Ray cluster of two nodes (one task per bag) and on one
machine, each bag's figures equal the single-bag command's on that bag; the report applies the thresholds to
each bag and to the whole, names the worst bag and every bag it could not judge; a task that fails twice is
named; without ``--ray`` nothing of Ray is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from ray_cluster import RAY_ENV, REPO, cluster  # noqa: F401 - cluster: the fixture
from test_replay_eval import GOOD
from test_replay_eval import PARAMS as ONE_BAG_PARAMS

from oxygen_ros.replay.bagio import BagReader, BagWriter
from oxygen_ros.replay.cli import main
from oxygen_ros.replay.config import load_replay_config
from oxygen_ros.replay.scene import scene_for_config, write_demo_bag

# the single-bag tests' parameters, the gripper output on j1 (so --against states compares it), one torch thread
PARAMS = (ONE_BAG_PARAMS.format(**GOOD).replace('"j1,j2,j3,j4,j5,j6,j7", gripper', '"j1,j2,j3,j4,j5,j6,j7", j1')
          .replace("    seed: 3\n", "    seed: 3\n    num_threads: 1\n"))  # fmt: skip
SCENES = {"a": (2.4, 1), "b": (2.8, 2), "c": (3.2, 3)}  # name: (seconds, scene seed)
COMMON = ["--against", "states", "--seed", "3", "-q", "--no-plots"]
RUN_AND_SAY_IF_RAY = ("import sys; from oxygen_ros.replay.cli import main; rc = main(sys.argv[1:]); "
                      "print('ray imported:', 'ray' in sys.modules, file=sys.stderr); sys.exit(rc)")  # fmt: skip

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Three demo scenes of different lengths and motions in one folder, and a bag without joint states."""
    folder = tmp_path_factory.mktemp("bags")
    params = folder.parent / f"{folder.name}_params.yaml"
    params.write_text(PARAMS)
    cfg = load_replay_config(params)
    (folder / "good").mkdir()
    for name, (seconds, seed) in SCENES.items():
        write_demo_bag(folder / "good" / f"{name}.mcap", scene_for_config(cfg, duration_s=seconds, seed=seed, camera_rate_hz=10.0,
                                                                          joint_rate_hz=25.0, image_width=32, image_height=24))  # fmt: skip
    broken = folder / "broken.mcap"
    with BagReader(folder / "good" / "a.mcap") as reader, BagWriter(broken) as writer:
        for m in reader.messages():
            if m.topic != "/joint_states":
                writer.write(m.topic, m.msgtype, m.timestamp_ns, m.rawdata)
    return SimpleNamespace(folder=folder / "good", params=params, broken=broken)


@pytest.fixture(scope="module")
def alone(bags: SimpleNamespace) -> dict[str, dict]:
    """Each bag's summary from the single-bag command, in this process (which has not imported Ray)."""
    out = {}
    for name in SCENES:
        bag = bags.folder / f"{name}.mcap"
        code = main(["eval", str(bag), "--params-file", str(bags.params), *COMMON, "--out", str(bags.folder.parent / f"{name}_alone")])
        assert code == 0
        out[str(bag.resolve())] = json.loads((bags.folder.parent / f"{name}_alone" / "summary.json").read_text())
    assert "ray" not in sys.modules
    return out


def _oxygen_replay(*args: str, timeout_s: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN_AND_SAY_IF_RAY, *args], capture_output=True, text=True,
                          timeout=timeout_s, env=RAY_ENV, cwd=REPO)  # fmt: skip


def _check_per_bag_figures(report: dict, alone: dict[str, dict]) -> None:
    assert [r["bag"] for r in report["bags"]] == sorted(alone)
    for row in report["bags"]:
        one = alone[row["bag"]]
        for key in ("dims", "chunks", "ticks", "episodes", "mae_by_step", "executed_steps", "safety", "seed"):
            assert row["summary"][key] == one[key], (row["bag"], key)
    means = {r["bag"]: r["mean_executed_mae"] for r in report["bags"]}
    assert len(set(means.values())) == 3  # three different bags, three different figures
    assert report["worst_bag"]["bag"] == max(means, key=lambda b: means[b])
    assert report["overall"]["chunks"] == sum(one["chunks"] for one in alone.values())


def test_bags_on_two_nodes_equal_each_bag_alone(cluster: str, bags: SimpleNamespace, alone: dict[str, dict],
                                                tmp_path: Path) -> None:  # fmt: skip
    done = _oxygen_replay("eval", str(bags.folder), "--params-file", str(bags.params), *COMMON, "--ray", cluster,
                          "--out", str(tmp_path / "ray"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    _check_per_bag_figures(report, alone)
    assert report["ray"] == {"address": cluster, "tasks": 3, "nodes": 2, "cpus_per_task": 1.0, "gpus_per_task": 0.0,
                             "failed_tasks": 0}  # fmt: skip
    assert report["passed"] and report["not_judged"] == [] and report["exit_code"] == 0
    assert json.loads((tmp_path / "ray" / "summary.json").read_text())["bags"] == report["bags"]
    assert all((tmp_path / "ray" / name / "ticks.csv").is_file() for name in SCENES)
    assert "worst bag:" in done.stdout and "all 3 bags" in done.stdout


def test_thresholds_per_bag_and_whole_and_bags_not_judged_on_one_machine(bags: SimpleNamespace, alone: dict[str, dict],
                                                                         tmp_path: Path) -> None:  # fmt: skip
    j1 = sorted(one["dims"]["j1"]["executed"]["mae"] for one in alone.values())
    limit = (j1[1] + j1[2]) / 2  # only the bag worst on j1 is over it
    done = _oxygen_replay("eval", str(bags.folder / "*.mcap"), str(bags.broken), "--params-file", str(bags.params), *COMMON,
                          "--max-mae", f"j1={limit}", "--out", str(tmp_path / "local"))  # fmt: skip
    assert "ray imported: False" in done.stderr
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["not_judged"] == [{"bag": str(bags.broken.resolve()), "error": report["not_judged"][0]["error"]}]
    assert "joint state topic /joint_states is not in the bag" in report["not_judged"][0]["error"]
    assert "broken.mcap not judged" in done.stderr
    over = [r["bag"] for r in report["bags"] if not r["passed"]]
    worst_j1 = max(alone, key=lambda b: alone[b]["dims"]["j1"]["executed"]["mae"])
    assert over == [worst_j1]
    overall_j1 = report["overall"]["dims"]["j1"]["executed"]["mae"]
    assert any(f.startswith("overall: j1") for f in report["failures"]) == (overall_j1 > limit)
    assert any(f.startswith(f"{worst_j1}: j1") for f in report["failures"])
    _check_per_bag_figures(report, alone)


def test_a_task_that_fails_twice_is_named(cluster: str, bags: SimpleNamespace, tmp_path: Path) -> None:
    """A checkpoint folder the tasks cannot load: each bag's task fails, is retried once, and the bag is named."""
    values = yaml.safe_load(bags.params.read_text())
    (tmp_path / "empty_checkpoint").mkdir()
    values["oxygen_node"]["ros__parameters"]["checkpoint"] = str(tmp_path / "empty_checkpoint")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(values))
    done = _oxygen_replay("eval", str(bags.folder), "--params-file", str(params), *COMMON, "--ray", cluster,
                          "--out", str(tmp_path / "out"), timeout_s=600)  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["ray"]["failed_tasks"] == 3 and report["overall"] is None
    assert sorted(n["bag"] for n in report["not_judged"]) == sorted(str((bags.folder / f"{s}.mcap").resolve()) for s in SCENES)
    assert all("failed twice" in n["error"] and "empty_checkpoint" in n["error"] for n in report["not_judged"]), report
    assert done.stderr.count("not judged: a Ray task failed twice") == 3


def test_bad_bag_arguments_and_ray_options_are_refused(bags: SimpleNamespace, tmp_path: Path) -> None:
    for args, says in (([str(tmp_path / "nothing*.mcap")], "no bag there"), ([str(bags.folder), "--compare", str(bags.params)], "--compare judges one bag"),
                       ([str(bags.folder), "--ray-cpus", "2"], "go with --ray"), ([str(bags.folder), "--ray", "--ray-cpus", "0"], "--ray-cpus must be > 0")):  # fmt: skip
        done = _oxygen_replay("eval", *args, "--params-file", str(bags.params), "-q", timeout_s=120)
        assert done.returncode == 2 and says in done.stderr, done.stderr[-2000:]
