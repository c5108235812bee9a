"""What the policy node keeps per robot it serves: the robot's inputs, publishers, `~/ask` server, diagnostics,
log lines and the timing of its last chunk.

A node serving one robot (the `robots` parameter empty) has one `RobotPorts` named ``""`` whose topics are the
parameters' names as they are. With `robots: [arm1, arm2]` each robot has its own, and every topic resolves as
a one-robot node started in the namespace ``<node namespace>/<robot>`` would resolve it (`robot_topic`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rclpy.publisher import Publisher

from oxygen_ros.interface.inputs import InputStore
from oxygen_ros.interface.topic_names import robot_topic

from .ask_server import AskServer
from .controller_outputs import ControllerOutputs
from .diagnostics import Diagnostics
from .robot_log import RobotLog
from .safety_port import SafetyPort
from .topic_stats import TopicStatistics

__all__ = ["RobotPorts", "TextPublishers", "diagnostics_prefix"]


@dataclass
class TextPublishers:
    delta: Publisher
    final: Publisher


def diagnostics_prefix(robot: str) -> str:
    """The name every /diagnostics status of this robot starts with."""
    return f"oxygen_ros: {robot}" if robot else "oxygen_ros"


@dataclass
class RobotPorts:
    name: str  # the robot's namespace token; "" = the node's only robot
    key: str  # the runtime's name of the robot ("" = the engine's first)
    node_name: str
    store: InputStore
    diag: Diagnostics
    topic_stats: TopicStatistics
    ask: AskServer
    log: RobotLog
    chunk_pub: Publisher | None = None
    outputs: ControllerOutputs | None = None
    reset_pose_pub: Publisher | None = None  # ~/reset_pose, latched (a plain publisher, also in a managed node)
    safety: SafetyPort | None = None  # the stop input, hold watchdog and safety diagnostics of the outputs
    text_pubs: dict[str, TextPublishers] = field(default_factory=dict)
    subscriptions: list[Any] = field(default_factory=list)
    instruction: Any = None  # the instruction's LiveAndLatchedSubscription while active
    episodes: Any = None  # the EpisodeStarts of a simulator (episode_topic) while active
    last_chunk_s: float | None = None  # node-clock time of the tick of the last chunk
    last_latency_s: float = 0.0  # observation → publication of the last chunk
    last_instruction: str = ""

    def topic(self, name: str) -> str:
        """``name`` (a parameter's topic, relative, absolute or private) for this robot."""
        return robot_topic(self.name, name, self.node_name)

    def publishers(self) -> list[Publisher]:
        """Every publisher of this robot except the controller outputs (those have their own `destroy`)."""
        pubs = [self.chunk_pub] if self.chunk_pub is not None else []
        return pubs + [p for t in self.text_pubs.values() for p in (t.delta, t.final)]
