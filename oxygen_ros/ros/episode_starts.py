"""A simulator's episode starts, for a policy node that evaluates in it (``episode_topic``).

``oxygen_sim_node`` reports each episode's start on ``~/episode`` (std_msgs/String, JSON: ``event`` "start",
``seed``, ``clock_start_ns``) before the episode's first observation. The node keeps the starts received and, at
the first tick at or after one, seeds the robot's action noise with the episode's seed and restarts its text
schedule (``PolicyRuntime.start_episode``), as ``oxygen-sim eval`` does for each episode: the same seeds then give
the same chunks whatever ran before them, over DDS in separate processes too.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any, Callable

from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

# Reliable as the simulator's reports; volatile: a node started late does not replay the starts it missed.
EPISODE_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)


class EpisodeStarts:
    def __init__(self, node: Any, topic: str, on_bad: Callable[[str], None], callback_group: Any = None) -> None:
        self._starts: deque[tuple[int, int]] = deque()  # (clock_start_ns, seed), in the order reported
        self._on_bad = on_bad
        self.subscription = node.create_subscription(String, topic, self._on_report, EPISODE_QOS, callback_group=callback_group)

    def _on_report(self, msg: String) -> None:
        try:
            report = json.loads(msg.data)
            if report.get("event") == "start":
                self._starts.append((int(report["clock_start_ns"]), int(report["seed"])))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._on_bad(f"episode report ignored ({type(exc).__name__}: {exc}): {msg.data[:80]!r}")

    def due(self, now_ns: int) -> int | None:
        """The seed of the latest episode started by ``now_ns`` that was not taken yet, else None."""
        seed = None
        while self._starts and self._starts[0][0] <= now_ns:
            seed = self._starts.popleft()[1]
        return seed
