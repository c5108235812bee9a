"""`oxygen-sim eval --envs N`: N episodes at once through one engine give the outcomes of running them one by one
(the committed demo policy, closed loop in simulated time)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from oxygen_ros.runtime import PolicyRuntime
from oxygen_ros.sim import cli
from oxygen_ros.sim.cli import load_params
from oxygen_ros.sim.evaluate import deterministic_config, eval_specs, evaluate, run_episode

PARAMS = Path(__file__).resolve().parents[1] / "config" / "demo_policy.yaml"


def load(backend: str = "eager") -> PolicyRuntime:
    config, _ = load_params(PARAMS)
    return PolicyRuntime.load(dataclasses.replace(deterministic_config(config), action_backend=backend))


def test_episodes_at_once_give_the_outcomes_of_one_by_one() -> None:
    _, settings = load_params(PARAMS)
    settings = dataclasses.replace(settings, time_limit_s=6.0)
    specs = eval_specs(40, 5)  # 5 episodes on 3 environments: two of them start a second episode mid-run
    alone = [run_episode(load(), spec, settings) for spec in specs]
    runtime = load()
    together = {r.spec.seed: r for r in evaluate(runtime, specs, settings, envs=3)}
    assert sorted(together) == [s.seed for s in specs]
    assert len(runtime.robots) == 3
    for a in alone:
        b = together[a.spec.seed]
        assert (a.success, a.chunks, a.time_to_success_s) == (b.success, b.chunks, b.time_to_success_s), a.spec
        assert all(np.array_equal(x, y) for x, y in zip(a.actions, b.actions))
        # the same things are said about the same frames (text may finish on other ticks: it is batched)
        said_a = {(t.frame_seq, t.task, t.text) for t in a.texts}
        said_b = {(t.frame_seq, t.task, t.text) for t in b.texts}
        assert said_a & said_b and len(said_a & said_b) >= 0.8 * min(len(said_a), len(said_b))
    assert any(a.success for a in alone)
    assert runtime.engine.kv.stats().live_requests == 0
    assert runtime.engine.stats().ticks > 0


def test_prefixes_of_equal_length_share_a_call_bit_for_bit() -> None:
    runtime = load()
    engine = runtime.engine
    for name in ("b", "c"):
        runtime.add_robot(name)
    _, settings = load_params(PARAMS)
    from oxygen_ros.sim.evaluate import EpisodeLoop

    loops = {n: EpisodeLoop(runtime, spec, settings, n) for n, spec in zip(("", "b", "c"), eval_specs(40, 3))}
    frames = {n: loop.observe() for n, loop in loops.items()}
    calls = []
    original = engine.act_batch
    engine.act_batch = lambda prefixes, noise: calls.append(len(prefixes)) or original(prefixes, noise)
    engine.tick_many(frames, exact=True)
    lengths = sorted(f.prompt_tokens.numel() for f in frames.values())
    assert sorted(calls) == sorted(lengths.count(n) for n in set(lengths))


def test_cli_reports_envs_and_wall_time(capsys) -> None:  # noqa: ANN001
    assert cli.main(["eval", "--episodes", "2", "--envs", "2", "--time-limit", "1.0", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["envs"] == 2 and summary["wall_s"] > 0 and summary["episodes"] == 2
    assert cli.main(["eval", "--episodes", "2", "--envs", "2", "--engine-mode", "sequential", "--quiet"]) == 2
    assert "envs needs engine_mode oxygen" in capsys.readouterr().err


@pytest.mark.parametrize("envs", [0])
def test_bad_envs_is_refused(envs: int, capsys) -> None:  # noqa: ANN001
    assert cli.main(["eval", "--episodes", "1", "--envs", str(envs)]) == 2
    assert "--envs must be >= 1" in capsys.readouterr().err
