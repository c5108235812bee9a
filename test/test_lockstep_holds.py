"""The lockstep ALOHA simulator goes on at its pace whatever the policy node's guard does: a wild model (a small
π0.5 with its action output x30) whose chunks are refused, and a stop set then cleared mid-episode, are each
answered by the node's hold commands (`oxygen_node` + `oxygen_sim_node` over DDS, `run_loop`), so no observation
waits out the simulator's 30 s `lockstep_timeout_s`, and commands resume with the first chunk after the stop is
cleared. Few steps, the file's 96 x 96 cameras."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from aloha_available import require_aloha

require_aloha()

from oxygen_ros.sim.aloha.evaluation import small_checkpoint  # noqa: E402
from oxygen_ros.sim_ros.aloha_loop import node_values, run_loop  # noqa: E402

PARAMS = Path(__file__).resolve().parents[1] / "config" / "aloha_demo.yaml"
STEPS = 100  # 2 s: four chunks of 25 steps an episode
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _loop(action_scale: float, seeds: list[int], on_ready: Any, **more: Any) -> Any:
    with small_checkpoint(action_scale=action_scale) as overrides:
        values = node_values(PARAMS, {**overrides, "engine_mode": "action_only", "episode_topic": "", **more})
        return run_loop(values, seeds, image_size=(96, 96), fast_render=True, episode_steps=STEPS, timeout_s=600,
                        on_ready=on_ready)  # fmt: skip


def test_a_wild_model_s_refused_chunks_do_not_stall_the_lockstep_simulator() -> None:
    guards: list[Any] = []
    warnings: list[str] = []

    def on_ready(policy: Any, sim: Any) -> None:
        port = policy._ports[0]
        guards.append(port.outputs.guard)
        warning = port.safety.log.warning
        port.safety.log.warning = lambda message: (warnings.append(message), warning(message))[1]

    result = _loop(30.0, [0, 1, 2], on_ready)
    s = result.sim_stats
    print(f"\nwild model x30, 3 episodes of {STEPS} steps: {s['queries']} observations, {s['answers']} answered, "
          f"{s['timeouts']} lockstep timeouts, {guards[0].refusals.chunks} chunks refused, wall {result.wall_s:.1f} s")
    assert len(result.episodes) == 3 and s["timeouts"] == 0 and s["answers"] == s["queries"]
    assert guards[0].refusals.chunks >= 3  # refused, each answered by the hold commands
    said = [w for w in warnings if w.startswith("chunks refused, the outputs held")]
    assert said and "out_of_range x" in said[0], warnings  # the log names them by output, joint and reason
    assert result.wall_s < 3 * 30.0  # not one 30 s wait, let alone one per observation


def test_a_stop_set_and_cleared_mid_episode_does_not_stall_the_lockstep_simulator() -> None:
    """The stop set and cleared through the node's ``~/set_stop`` service (a real client over DDS)."""
    from std_srvs.srv import SetBool

    seen: dict[str, Any] = {"states": [], "calls": []}

    def on_ready(policy: Any, sim: Any) -> None:
        safety = policy._ports[0].safety
        client = policy.create_client(SetBool, "/oxygen_node/set_stop")

        def call(data: bool) -> None:  # from the simulator's thread: the executor answers meanwhile
            assert client.wait_for_service(timeout_sec=30.0)
            future = client.call_async(SetBool.Request(data=data))
            deadline = time.monotonic() + 30.0
            while not future.done() and time.monotonic() < deadline:
                time.sleep(0.005)
            assert future.done() and future.result().success
            seen["calls"].append(time.monotonic())

        def on_step(driver: Any) -> None:
            step = len(seen["states"])  # the episode's steps so far
            if step == 20:
                call(True)
            elif step == 45:
                call(False)
            state = safety.guard.state.state
            if state == "RUN" and len(seen["calls"]) == 2 and "resumed" not in seen:
                seen["resumed"] = time.monotonic()
            seen["states"].append((step, state))

        sim.on_step = on_step

    # the random model's chunks clamped into the ranges rather than refused: it commands until the stop
    result = _loop(1.0, [3], on_ready, limit_out_of_range_margin=100.0)
    s = result.sim_stats
    assert s["timeouts"] == 0 and s["answers"] == s["queries"], s
    states = dict(seen["states"])
    assert states[30] == "STOP", seen["states"][:60]  # stopped, and the simulator stepped on
    # commanding again with the first chunk after the clear (chunks come every 25 steps)
    assert any(state == "RUN" for step, state in seen["states"] if 45 < step <= 45 + 25 + 1), seen["states"][40:80]
    resumed_s = seen["resumed"] - seen["calls"][1]
    print(f"\nstop set and cleared over ~/set_stop mid-episode: commanding again {resumed_s:.2f} s (wall) after the clear")
    assert resumed_s < 10.0  # the next chunk's time, not a lockstep timeout
