"""``oxygen-replay record``'s DDS side: subscribe to topics as they appear and write what arrives to a bag.

Each topic is subscribed raw (the CDR bytes as received, what rosbag2 stores) once a publisher shows it, with a
QoS every publisher of it can serve (reliable and transient-local only where all publishers offer them, as
rosbag2 adapts its subscriptions); its messages are written by the callback with ``rosbags`` at their receipt
time on the node's clock. A stop (SIGINT, SIGTERM, ``--duration``) ends the spinning, takes what the middleware
already holds, then closes the bag: every message received is in it. Message types the bag's type store lacks
(neither ROS 2's standard types nor oxygen_ros_msgs) are reported and skipped.
"""

from __future__ import annotations

import importlib
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions

from .bagio import BagWriter, qos_profile

SKIPPED_BY_ALL = ("/rosout", "/parameter_events")
DRAIN_IDLE_ROUNDS = 5  # spins without a message before the bag is closed after a stop
DEPTH = 1000


@dataclass
class RecordOptions:
    topics: list[str] | None = None  # None: every topic but SKIPPED_BY_ALL
    remap: Mapping[str, str] = field(default_factory=dict)  # recorded topic → name in the bag
    storage: str | None = None
    overwrite: bool = False
    duration_s: float | None = None
    discovery_period_s: float = 0.5
    use_sim_time: bool = False


class Recorder(Node):
    def __init__(self, writer: BagWriter, options: RecordOptions, say: Callable[[str], None]) -> None:
        super().__init__("oxygen_recorder", parameter_overrides=[Parameter("use_sim_time", value=options.use_sim_time)])
        self.writer, self.options, self.say = writer, options, say
        self.received = 0
        self._recorded: dict[str, Any] = {}
        self._skipped: set[str] = set()
        self.discover()
        self.create_timer(options.discovery_period_s, self.discover)

    def discover(self) -> None:
        for topic, types in self.get_topic_names_and_types():
            if topic in self._recorded or topic in self._skipped:
                continue
            wanted = topic in self.options.topics if self.options.topics is not None else topic not in SKIPPED_BY_ALL
            if not wanted:
                continue
            msgtype = types[0]
            if msgtype not in self.writer.typestore.types:
                self._skipped.add(topic)
                self.say(f"warning: {topic} has type {msgtype}, which the bag's type store lacks: not recorded")
                continue
            qos = self._qos(topic)
            recorded_qos = qos_profile(qos.reliability == ReliabilityPolicy.RELIABLE,
                                       qos.durability == DurabilityPolicy.TRANSIENT_LOCAL, 10)  # fmt: skip
            name = self.options.remap.get(topic, topic)
            self._recorded[topic] = self.create_subscription(
                message_class(msgtype), topic, lambda data, n=name, t=msgtype, q=recorded_qos: self._write(n, t, data, q),
                qos, raw=True)  # fmt: skip
            self.say(f"recording {topic} ({msgtype})" + (f" as {name}" if name != topic else ""))

    def _qos(self, topic: str) -> QoSProfile:
        offered = [info.qos_profile for info in self.get_publishers_info_by_topic(topic)]
        reliable = bool(offered) and all(q.reliability == ReliabilityPolicy.RELIABLE for q in offered)
        latched = bool(offered) and all(q.durability == DurabilityPolicy.TRANSIENT_LOCAL for q in offered)
        return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=DEPTH,
                          reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                          durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)  # fmt: skip

    def _write(self, topic: str, msgtype: str, data: bytes, qos: Any) -> None:
        self.writer.write(topic, msgtype, self.get_clock().now().nanoseconds, data, qos=[qos])
        self.received += 1


def message_class(msgtype: str) -> Any:
    """The rclpy class of ``pkg/msg/Name`` (what rosidl_runtime_py's get_message does, without that package)."""
    package, _, name = msgtype.rpartition("/")
    return getattr(importlib.import_module(package.replace("/", ".")), name)


def record(output: str, options: RecordOptions, say: Callable[[str], None]) -> dict[str, Any]:
    """Record until SIGINT / SIGTERM or ``duration_s``; returns a summary (the bag, messages per topic)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    started = time.monotonic()
    rclpy.init(args=[], signal_handler_options=SignalHandlerOptions.NO)  # no ROS arguments from our command line
    try:
        with BagWriter(output, storage=options.storage, overwrite=options.overwrite) as writer:
            node = Recorder(writer, options, say)
            executor = SingleThreadedExecutor()
            executor.add_node(node)
            say(f"recording into {output}; Ctrl-C stops")
            while not stop.is_set():
                if options.duration_s is not None and time.monotonic() - started >= options.duration_s:
                    break
                executor.spin_once(timeout_sec=0.05)
            idle = 0
            while idle < DRAIN_IDLE_ROUNDS:  # what the middleware already holds
                before = node.received
                executor.spin_once(timeout_sec=0.02)
                idle = idle + 1 if node.received == before else 0
            executor.remove_node(node)
            node.destroy_node()
            counts = dict(writer.counts)
    finally:
        rclpy.try_shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    say(f"wrote {sum(counts.values())} messages on {len(counts)} topics to {output}")
    return {"output": str(output), "messages": sum(counts.values()), "topics": counts,
            "wall_s": round(time.monotonic() - started, 2)}  # fmt: skip
