"""A topic read as a command input (the instruction, the stop): every reliable publisher heard, a latched one's
last message read once, and no "requesting incompatible QoS" warning told to a volatile publisher needlessly.

A volatile reliable subscription hears every reliable publisher, volatile or transient local, from the
moment it matches. Only a transient local reader receives what a latched publisher sent before the match
(e.g. a simulator's instruction published before the node started) — but while such a reader exists, every
volatile publisher on the topic logs "New subscription discovered ... requesting incompatible QoS ... Last
incompatible policy: DURABILITY", although the volatile reader gets its messages.

So the transient local reader (the history reader) lives only for a moment: a steady-clock timer watches the
graph; when a latched publisher appears whose history is unread and no volatile publisher is on the topic
(ROS's own rule for `DurabilityPolicy.BEST_AVAILABLE`: transient local only when every publisher offers it),
the reader is created, and it is destroyed as soon as it delivered a message, or after `HISTORY_WINDOW_S`,
or when a volatile publisher shows up. A latched publisher that appears beside a volatile one is heard live
only — unless `history_beside_volatile` (the stop: a stop set before the node started must count even while a
joystick's volatile publisher is on the topic; that publisher then logs the warning once per latched publisher),
and the reader is also open for `HISTORY_WINDOW_S` from the start, so that a stop latched before the node
started arrives as discovery matches, before the first command can go out.

A best-effort publisher matches no reliable reader: `on_incompatible` is called (rclpy's incompatible-QoS event)
so that the node says so rather than stay deaf in silence.
"""

from __future__ import annotations

from typing import Any, Callable

from rclpy.clock import Clock, ClockType
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

__all__ = ["HISTORY_QOS", "LIVE_QOS", "LiveAndLatchedSubscription"]

LIVE_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
HISTORY_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
GRAPH_CHECK_S = 0.2  # how often the graph is looked at (steady clock: sim time may not run yet)
HISTORY_WINDOW_S = 2.0  # the history reader's longest life: a latched message arrives within ms of the match


class LiveAndLatchedSubscription:
    """`on_message(msg, info)` for every message of type `msg_type`; `on_incompatible(event)` for a publisher
    that no reader can hear (best effort). A message may come twice (live and from the history reader):
    ``info["source_timestamp"]`` orders them."""

    def __init__(self, node: Node, msg_type: Any, topic: str, on_message: Callable[[Any, Any], None],
                 on_incompatible: Callable[[Any], None], callback_group: Any = None,
                 history_beside_volatile: bool = False) -> None:  # fmt: skip
        self.node = node
        self.msg_type = msg_type
        self.history_beside_volatile = history_beside_volatile
        self.topic = node.resolve_topic_name(topic)
        self._on_message = on_message
        self._group = callback_group
        self.live = node.create_subscription(msg_type, topic, on_message, LIVE_QOS, callback_group=callback_group,
                                             event_callbacks=SubscriptionEventCallbacks(incompatible_qos=on_incompatible))
        self._history: Any = None
        self._history_age_s = 0.0
        self._history_delivered = False
        self._read: set[bytes] = set()  # latched publishers whose history was read (or cannot be, beside a volatile one)
        self._timer = node.create_timer(GRAPH_CHECK_S, self._check_graph, callback_group=callback_group,
                                        clock=Clock(clock_type=ClockType.STEADY_TIME))  # fmt: skip
        if history_beside_volatile:  # (the stop) read a latched history from the start, not after a look at the graph:
            self._open_history()  # the message arrives as discovery matches, before the first command can go out

    @property
    def reading_history(self) -> bool:
        return self._history is not None

    def _check_graph(self) -> None:
        infos = self.node.get_publishers_info_by_topic(self.topic)
        volatile = any(i.qos_profile.durability != DurabilityPolicy.TRANSIENT_LOCAL for i in infos)
        unread = {bytes(i.endpoint_gid) for i in infos if i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL} - self._read
        if self._history is not None:
            self._history_age_s += GRAPH_CHECK_S
            if (volatile and not self.history_beside_volatile) or self._history_delivered \
                    or self._history_age_s >= HISTORY_WINDOW_S:
                self._drop_history()  # (a latched publisher not marked read gets a reader at the next look)
            else:
                self._read |= unread  # matched by the open reader: their history comes to it
            return
        if unread and volatile and not self.history_beside_volatile:
            self._read |= unread  # heard live by the volatile reader; its history would cost a false warning
        elif unread:
            self._read |= unread
            self._open_history()

    def _open_history(self) -> None:
        self._history_age_s, self._history_delivered = 0.0, False
        quiet = SubscriptionEventCallbacks(incompatible_qos=lambda _event: None)
        self._history = self.node.create_subscription(self.msg_type, self.topic, self._on_history, HISTORY_QOS,
                                                      callback_group=self._group, event_callbacks=quiet)  # fmt: skip

    def _on_history(self, msg: Any, info: Any) -> None:
        self._history_delivered = True
        self._on_message(msg, info)

    def _drop_history(self) -> None:
        self.node.destroy_subscription(self._history)
        self._history = None

    def close(self) -> None:
        self._timer.cancel()
        self.node.destroy_timer(self._timer)
        if self._history is not None:
            self._drop_history()
        self.node.destroy_subscription(self.live)
