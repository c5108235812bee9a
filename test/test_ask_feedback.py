"""`~/ask` feedback over real DDS with rclpy's ActionClient and its default feedback queue: a decode burst
(many tokens per tick) still delivers every delta of one goal and of eight goals at once before their
results; a cancel accepted before the answer ends makes it cancelled."""

from __future__ import annotations

import pytest
from action_msgs.msg import GoalStatus

from test_ask import Goal, ask_robot
from test_node import TEST_OVERRIDES

TOKENS = 48
# 24 decode steps per tick: an answer's deltas come in bursts of 24 within a few milliseconds.
OVERRIDES = {**TEST_OVERRIDES, "tokens_per_frame": 24, "ask_max_goals": 8, "ask_max_tokens": TOKENS, "kv_budget_mb": 16.0}


@pytest.fixture(scope="module")
def burst(tmp_path_factory):
    with ask_robot(tmp_path_factory.mktemp("ask_burst"), "ask_burst_driver", OVERRIDES) as robot:
        yield robot


def _all_deltas_arrived(goal: Goal, result) -> None:  # noqa: ANN001
    """Every message in order (seq 0, 1, ...; a message may join the deltas of one burst) and every token."""
    r = result.result
    assert result.status == GoalStatus.STATUS_SUCCEEDED, r
    assert [f.seq for f in goal.feedback] == list(range(len(goal.feedback)))
    assert r.answer == "".join(f.text for f in goal.feedback)
    if r.finish_reason == "max_tokens":
        assert sum(len(f.token_ids) for f in goal.feedback) == TOKENS


@pytest.mark.parametrize("goals", [1, 8])
def test_every_delta_reaches_the_client_before_the_result(burst, goals):
    sent = [Goal(burst, f"what is on the table, number {i}?", TOKENS) for i in range(goals)]
    for goal in sent:
        _all_deltas_arrived(goal, goal.result())
    assert sum(len(f.token_ids) for g in sent for f in g.feedback) > 10  # more deltas than the client's queue holds


def test_a_cancel_accepted_before_the_last_token_cancels(burst):
    goal = Goal(burst, "what is on the table?", TOKENS)
    handle = goal.accepted()
    cancel = handle.cancel_goal_async()  # at once: the answer has not started, or is still being sent
    assert burst.spin_until(cancel.done, timeout=15)
    res = goal.result(timeout=30)
    if cancel.result().goals_canceling:
        assert res.status == GoalStatus.STATUS_CANCELED and res.result.finish_reason == "cancelled", res.result
    else:  # refused: the answer was complete already
        assert res.status == GoalStatus.STATUS_SUCCEEDED, res.result
