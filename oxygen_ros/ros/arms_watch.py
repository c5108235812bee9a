"""When a demo launch of simulated arms ends, and the line that says how: kept free of `launch` (not on PyPI) so it
is tested anywhere; `launch/two_arms_sim.launch.py` feeds it the processes' exits and shuts launch down on its word.

A demo launch ends when its last simulated arm has exited (each exits after its episodes), or when the policy
node exits while arms still run (they would wait for commands forever). A robot launch has no such end: the node
keeps serving, and says per robot when its inputs are lost (`robot_log.py`).
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["ArmsWatch"]


def _code(returncode: int) -> str:
    return f"signal {-returncode}" if returncode < 0 else f"code {returncode}"


class ArmsWatch:
    def __init__(self, arms: Sequence[str], policy: str = "oxygen_node") -> None:
        self.arms = list(arms)
        self.policy = policy
        self.exits: dict[str, int] = {}  # arm -> its return code, in the order they exited
        self.ended = ""  # the reason the launch ends, once decided

    def arm_exited(self, arm: str, returncode: int) -> str | None:
        """An arm's process exited: the reason to end the launch once the last one did, else None."""
        self.exits[arm] = returncode
        if self.ended or len(self.exits) < len(self.arms):
            return None
        failed = [f"{a} ({_code(c)})" for a, c in self.exits.items() if c != 0]
        if failed:
            self.ended = (f"the simulated arms exited, {len(failed)} of {len(self.arms)} with an error: "
                          f"{', '.join(failed)}; ending the launch")
        else:
            self.ended = f"all {len(self.arms)} simulated arms finished their episodes; ending the launch"
        return self.ended

    def policy_exited(self, returncode: int) -> str | None:
        """The policy node exited: the reason to end the launch while arms still run, else None."""
        if self.ended:
            return None  # the launch is ending already: the node stops with it
        running = [a for a in self.arms if a not in self.exits]
        self.ended = f"{self.policy} exited ({_code(returncode)}) while {', '.join(running)} still ran; ending the launch"
        return self.ended
