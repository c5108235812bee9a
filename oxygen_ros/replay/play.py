"""Live replay: publish a bag's messages on ROS 2 topics at recorded speed (times a rate factor), with
``/clock`` (rosgraph_msgs/Clock) so nodes running with ``use_sim_time`` follow the bag's time.

Messages are published as the recorded CDR bytes (rclpy's raw publish), so stamps and contents are
exactly what was recorded. Each topic gets a publisher of its recorded type (imported from the type's
Python package); publishers are reliable — which matches reliable and best-effort subscribers alike —
and transient-local where the recording says the topic was (e.g. a latched instruction).

rclpy is imported only when playing, in its own context, so the rest of the tools stay ROS-free and a
test process can run a player next to its own nodes.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rosbags.interfaces import QosDurability

from .bagio import NS_PER_S, BagError, BagReader, TopicSummary

ProgressFn = Callable[[float, str], None]
CLOCK_TOPIC = "/clock"


class PlayError(Exception):
    """Nothing can be played (no topic with an importable message type); the message says why."""


@dataclasses.dataclass
class PlayOptions:
    rate: float = 1.0  # playback speed factor: 2.0 = twice as fast as recorded
    loop: bool = False
    clock: bool = True  # publish /clock from the bag's time
    clock_hz: float = 100.0  # /clock messages per second of bag time
    wait_for_subscribers_s: float = 0.0  # wait up to this long until every topic (and /clock) has a subscriber
    remap: Mapping[str, str] = dataclasses.field(default_factory=dict)
    topics: Sequence[str] | None = None  # only these (remapped) topics; None = all
    start_offset_s: float = 0.0  # skip this much of the bag's beginning
    linger_s: float = 0.3  # keep the publishers alive this long after the last message (delivery)
    node_name: str = "oxygen_replay"

    def validate(self) -> "PlayOptions":
        if not (self.rate > 0 and self.rate < float("inf")):
            raise ValueError(f"rate must be a positive number, got {self.rate}")
        if not self.clock_hz > 0:
            raise ValueError(f"clock rate must be > 0 Hz, got {self.clock_hz}")
        if self.wait_for_subscribers_s < 0 or self.start_offset_s < 0 or self.linger_s < 0:
            raise ValueError("waiting, start offset and linger times must be >= 0")
        return self


@dataclasses.dataclass
class PlaySummary:
    published: dict[str, int]  # topic → messages
    clock_messages: int
    skipped_topics: dict[str, str]  # topic → why it was not played
    loops: int
    wall_s: float
    stopped: bool  # ended by stop_event (e.g. SIGINT) rather than the end of the bag
    warnings: list[str]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def message_class(msgtype: str) -> type:
    """The rclpy message class of ``pkg/msg/Name`` (ImportError / AttributeError if not installed)."""
    pkg, kind, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


def _qos_for(info: TopicSummary, qos_module: Any) -> Any:
    transient = bool(info.qos) and all(q.durability == QosDurability.TRANSIENT_LOCAL for q in info.qos)
    depth = max([q.depth for q in info.qos if q.depth > 0] or [10])
    return qos_module.QoSProfile(
        depth=max(depth, 10) if not transient else depth,
        reliability=qos_module.ReliabilityPolicy.RELIABLE,
        durability=qos_module.DurabilityPolicy.TRANSIENT_LOCAL if transient else qos_module.DurabilityPolicy.VOLATILE,
        history=qos_module.HistoryPolicy.KEEP_LAST,
    )


class _Pacer:
    """Maps bag time to wall time for one pass and sleeps until a bag time is due (stoppable)."""

    def __init__(self, t0_ns: int, rate: float, stop: threading.Event) -> None:
        self.t0_ns, self.rate, self.stop = t0_ns, rate, stop
        self.wall0 = time.monotonic()

    def wait_until(self, bag_ns: int) -> bool:
        """False if stopped while waiting."""
        due = self.wall0 + (bag_ns - self.t0_ns) / NS_PER_S / self.rate
        while True:
            left = due - time.monotonic()
            if left <= 0:
                return not self.stop.is_set()
            if self.stop.wait(min(left, 0.1)):
                return False


class BagPlayer:
    """Publishes one bag; :meth:`play` blocks until the end (or ``stop_event``) and returns a summary."""

    def __init__(self, bag: str | Path, options: PlayOptions | None = None, *, stop_event: threading.Event | None = None,
                 progress: ProgressFn | None = None, log: Callable[[str], None] | None = None,
                 on_start: Callable[[], None] | None = None) -> None:  # fmt: skip
        self.bag = Path(bag)
        self.options = (options or PlayOptions()).validate()
        self.stop = stop_event or threading.Event()
        self.progress = progress
        self.log = log or (lambda _line: None)
        self.on_start = on_start
        self.warnings: list[str] = []
        self.published: dict[str, int] = {}
        self.skipped: dict[str, str] = {}
        self.clock_messages = 0

    def play(self) -> PlaySummary:
        """Raises BagError for a missing/unreadable bag and PlayError when no topic can be played, both
        before any ROS communication starts."""
        wall_start = time.monotonic()
        with BagReader(self.bag, remap=self.options.remap) as reader:  # check the bag before touching ROS
            for warning in reader.warnings:
                self._warn(warning)
            topics = self._select_topics(reader.topics)
        import rclpy
        import rclpy.qos as qos_module
        from rclpy.context import Context

        context = Context()
        rclpy.init(context=context)
        loops = 0
        try:
            node = rclpy.create_node(self.options.node_name, context=context, start_parameter_services=False)
            try:
                publishers = self._create_publishers(node, topics, qos_module)
                clock_pub = None
                if self.options.clock:
                    from rosgraph_msgs.msg import Clock

                    clock_pub = node.create_publisher(Clock, CLOCK_TOPIC, qos_module.QoSProfile(depth=10))
                # /clock too: a node on use_sim_time needs the bag's time from its first message on.
                self._wait_for_subscribers(publishers if clock_pub is None else {**publishers, CLOCK_TOPIC: clock_pub})
                if self.on_start is not None:
                    self.on_start()
                while not self.stop.is_set():
                    loops += 1
                    self._one_pass(publishers, clock_pub)
                    if not self.options.loop:
                        break
                if not self.stop.is_set() and self.options.linger_s:
                    self.stop.wait(self.options.linger_s)
            finally:
                node.destroy_node()
        finally:
            context.try_shutdown()
        return PlaySummary(dict(self.published), self.clock_messages, dict(self.skipped), loops,
                           time.monotonic() - wall_start, self.stop.is_set(), list(self.warnings))  # fmt: skip

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)
            self.log(text)

    def _select_topics(self, topics: Mapping[str, TopicSummary]) -> dict[str, tuple[type, TopicSummary]]:
        wanted = set(self.options.topics) if self.options.topics is not None else None
        if wanted is not None and (missing := sorted(wanted - set(topics))):
            self._warn(f"topics {missing} are not in the bag")
        chosen: dict[str, tuple[type, TopicSummary]] = {}
        for name, info in sorted(topics.items()):
            if wanted is not None and name not in wanted:
                continue
            if name == CLOCK_TOPIC and self.options.clock:
                self.skipped[name] = "the player publishes /clock itself (use --no-clock to play the recorded one)"
                continue
            try:
                chosen[name] = (message_class(info.msgtype), info)
            except (ImportError, AttributeError, ValueError) as exc:
                self.skipped[name] = f"message type {info.msgtype!r} is not installed for Python ({exc})"
        for name, why in self.skipped.items():
            self._warn(f"not playing {name}: {why}")
        if not chosen:
            raise PlayError(f"bag {self.bag}: no topic can be played" + (f" ({'; '.join(self.warnings)})" if self.warnings else ""))
        return chosen

    def _create_publishers(self, node: Any, topics: Mapping[str, tuple[type, TopicSummary]], qos_module: Any) -> dict[str, Any]:
        publishers = {}
        for name, (cls, info) in topics.items():
            try:
                publishers[name] = node.create_publisher(cls, name, _qos_for(info, qos_module))
            except Exception as exc:  # noqa: BLE001 - e.g. a topic name ROS refuses: skip that topic
                self.skipped[name] = f"cannot publish it: {exc}"
                self._warn(f"not playing {name}: {self.skipped[name]}")
        if not publishers:
            raise PlayError(f"bag {self.bag}: no topic can be played ({'; '.join(self.warnings)})")
        return publishers

    def _wait_for_subscribers(self, publishers: Mapping[str, Any]) -> None:
        limit = self.options.wait_for_subscribers_s
        if limit <= 0:
            return
        deadline = time.monotonic() + limit
        lonely = list(publishers)
        while lonely and time.monotonic() < deadline and not self.stop.is_set():
            lonely = [t for t, p in publishers.items() if p.get_subscription_count() == 0]
            if lonely:
                self.stop.wait(0.05)
        if lonely:
            self._warn(f"no subscriber after {limit:g} s on {lonely}; playing anyway")

    def _one_pass(self, publishers: Mapping[str, Any], clock_pub: Any) -> None:
        from rosgraph_msgs.msg import Clock

        from oxygen_ros.interface.convert import ns_to_stamp

        with BagReader(self.bag, remap=self.options.remap) as reader:
            start = reader.start_ns + round(self.options.start_offset_s * NS_PER_S)
            span = max(reader.end_ns - start, 1)
            pacer = _Pacer(start, self.options.rate, self.stop)
            clock_step = round(NS_PER_S / self.options.clock_hz)
            next_clock = start

            def clock_until(bag_ns: int) -> bool:
                nonlocal next_clock
                while clock_pub is not None and next_clock <= bag_ns:
                    if not pacer.wait_until(next_clock):
                        return False
                    clock_pub.publish(Clock(clock=ns_to_stamp(next_clock)))
                    self.clock_messages += 1
                    next_clock += clock_step
                return True

            last_report = 0.0
            for msg in reader.messages(list(publishers)):
                if msg.timestamp_ns < start:
                    continue
                if not clock_until(msg.timestamp_ns) or not pacer.wait_until(msg.timestamp_ns):
                    return
                publishers[msg.topic].publish(msg.rawdata)
                self.published[msg.topic] = self.published.get(msg.topic, 0) + 1
                if self.progress is not None and time.monotonic() - last_report > 0.1:
                    last_report = time.monotonic()
                    done = (msg.timestamp_ns - start) / span
                    self.progress(done, f"{(msg.timestamp_ns - start) / NS_PER_S:.1f} s of bag time")
            if clock_until(reader.end_ns) and self.progress is not None:
                self.progress(1.0, f"{(reader.end_ns - start) / NS_PER_S:.1f} s of bag time")
            for warning in reader.warnings:
                self._warn(warning)


def play_bag(bag: str | Path, options: PlayOptions | None = None, **kwargs: Any) -> PlaySummary:
    """Publish ``bag`` live (see :class:`BagPlayer`)."""
    return BagPlayer(bag, options, **kwargs).play()


__all__ = ["BagError", "BagPlayer", "PlayError", "PlayOptions", "PlaySummary", "message_class", "play_bag"]
