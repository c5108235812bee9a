"""``oxygen-sim eval --ray`` on a real Ray cluster of two nodes (``ray start --head`` and a second ``ray start
--address``, separate processes on 127.0.0.1, a second raylet standing for a second machine): the per-episode
records equal the single-machine run's; a task that fails twice is named with its seeds; the evaluation
without ``--ray`` imports nothing of Ray."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from ray_cluster import RAY_ENV, REPO, cluster, free_cpus  # noqa: F401 - cluster: the fixture


EVAL = ["eval", "--episodes", "4", "--seed", "11", "--time-limit", "4", "--quiet"]
RUN_AND_SAY_IF_RAY = ("import sys; from oxygen_ros.apps.oxygen_sim import main; rc = main(sys.argv[1:]); "
                      "print('ray imported:', 'ray' in sys.modules, file=sys.stderr); sys.exit(rc)")  # fmt: skip


def _oxygen_sim(*args: str, timeout_s: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN_AND_SAY_IF_RAY, *args], capture_output=True, text=True,
                          timeout=timeout_s, env=RAY_ENV, cwd=REPO)  # fmt: skip


def test_records_on_two_nodes_equal_one_machine(cluster: str, tmp_path: Path) -> None:
    alone = _oxygen_sim(*EVAL, "--json-out", str(tmp_path / "alone.json"))
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert "ray imported: False" in alone.stderr  # the package imports nothing of Ray without --ray
    on_ray = _oxygen_sim(*EVAL, "--envs", "2", "--ray", cluster, "--ray-shards", "2", "--json-out", str(tmp_path / "ray.json"))
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    one, two = (json.loads((tmp_path / name).read_text()) for name in ("alone.json", "ray.json"))
    assert len(one["episodes"]) == 4 and two["episodes"] == one["episodes"]  # bit-equal records, in spec order
    assert two["summary"]["ray"] == {"address": cluster, "tasks": 2, "nodes": 2, "cpus_per_task": 1.0,
                                     "gpus_per_task": 0.0, "failed_tasks": []}  # fmt: skip
    differ = {k for k in one["summary"].keys() | two["summary"].keys() if one["summary"].get(k) != two["summary"].get(k)}
    assert differ == {"ray", "envs", "wall_s"}, differ
    assert json.loads(on_ray.stdout.strip().splitlines()[-1]) == two["summary"]


def test_a_task_that_fails_twice_is_named(cluster: str, tmp_path: Path) -> None:
    """A checkpoint folder the tasks cannot load (empty, as on a node whose copy of the shared path is broken):
    each task fails, is retried once, and its seeds are named; nothing is counted as run."""
    values = yaml.safe_load((REPO / "config" / "demo_policy.yaml").read_text())
    node = values["/**"]["ros__parameters"]
    (tmp_path / "empty_checkpoint").mkdir()
    node.update(checkpoint=str(tmp_path / "empty_checkpoint"), tokenizer=str(REPO / node["tokenizer"]))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(values))
    done = _oxygen_sim(*EVAL, "--params-file", str(params), "--ray", cluster, "--ray-shards", "2", timeout_s=600)
    assert done.returncode == 1, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 0
    assert sorted(f["seeds"] for f in summary["ray"]["failed_tasks"]) == [[11, 12], [13, 14]], summary["ray"]
    assert all("empty_checkpoint" in f["error"] for f in summary["ray"]["failed_tasks"]), summary["ray"]
    assert done.stderr.count("a Ray task failed twice") == 2


def test_ray_options_are_checked_before_anything_loads() -> None:
    for args, says in ((["--ray-cpus", "2"], "go with --ray"), (["--ray", "--env", "aloha_transfer_cube"], "table-top"),
                       (["--ray", "--ray-shards", "0"], "--ray-shards >= 1")):  # fmt: skip
        done = _oxygen_sim("eval", *args, timeout_s=120)
        assert done.returncode == 2 and says in done.stderr, done.stderr[-2000:]


def test_ctrl_c_cancels_the_tasks(cluster: str) -> None:
    command = [sys.executable, "-c", RUN_AND_SAY_IF_RAY, "eval", "--episodes", "40", "--seed", "11", "--quiet",
               "--ray", cluster, "--ray-shards", "2"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=RAY_ENV, cwd=REPO)
    try:
        deadline = time.monotonic() + 240
        while free_cpus(cluster) > 0:  # both tasks hold their node's CPU
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "the Ray tasks still running were cancelled" in err, err[-3000:]
    deadline = time.monotonic() + 120
    while free_cpus(cluster) < 2:  # the cluster's CPUs free again: no task of the run goes on
        assert time.monotonic() < deadline, "the tasks went on after Ctrl-C"
        time.sleep(1)
