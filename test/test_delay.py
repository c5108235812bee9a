"""The simulated robot's transport delay hands everything on after the delay, in order."""

from __future__ import annotations

import pytest

from oxygen_ros.sim.delay import DelayLine


def test_actions_run_after_the_delay_in_order() -> None:
    line, ran = DelayLine(0.02), []
    line.push(1.000, lambda: ran.append("a"))
    line.push(1.005, lambda: ran.append("b"))
    assert line.due(1.019) == 0 and ran == []
    assert line.due(1.0201) == 1 and ran == ["a"]
    assert line.due(2.0) == 1 and ran == ["a", "b"] and len(line) == 0


def test_no_delay_runs_at_once_and_a_negative_one_is_refused() -> None:
    ran = []
    DelayLine(0.0).push(0.0, lambda: ran.append(1))
    assert ran == [1]
    with pytest.raises(ValueError, match=">= 0"):
        DelayLine(-0.01)
