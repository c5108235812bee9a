"""The policy node's inputs: its subscriptions per robot and their callbacks, which only convert and store (a
mixin of `OxygenNode`: the model thread reads the stores)."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from rclpy.event_handler import QoSRequestedIncompatibleQoSInfo
from rclpy.qos import qos_policy_name_from_kind, qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String

from oxygen_ros.interface.convert import compressed_image_to_array, image_to_array, joint_positions, stamp_to_ns

from .episode_starts import EpisodeStarts
from .latched_topic import LiveAndLatchedSubscription
from .robot_ports import RobotPorts

__all__ = ["InputCallbacks"]


class InputCallbacks:
    """Subscriptions and input callbacks of `OxygenNode` (uses its settings, ports, callback groups and clock)."""

    _ports: list[RobotPorts]
    settings: Any
    _input_group: Any

    def _create_subscriptions(self) -> None:
        for port in self._ports:
            port.subscriptions = self._subscribe(port)

    def _subscribe(self, port: RobotPorts) -> list[Any]:
        s = self.settings
        subs = []
        for slot, topic in enumerate(s.camera_topics):
            if not topic:
                continue
            msg_type, callback = (CompressedImage, self._on_compressed) if s.camera_compressed[slot] else (Image, self._on_image)
            subs.append(self.create_subscription(msg_type, port.topic(topic), partial(callback, port, slot),
                                                 qos_profile_sensor_data, callback_group=self._input_group))
        for source, joints in enumerate(s.joint_sources):  # one per joint-state topic (none without joint_names)
            subs.append(self.create_subscription(JointState, port.topic(joints.topic), partial(self._on_joint_state, port, source),
                                                 qos_profile_sensor_data, callback_group=self._input_group))
        port.instruction = LiveAndLatchedSubscription(self, String, port.topic(s.instruction_topic), partial(self._on_instruction, port),
                                                   partial(self._on_incompatible_instruction, port), self._input_group)  # fmt: skip
        if s.episode_topic:
            port.episodes = EpisodeStarts(self, port.topic(s.episode_topic), partial(port.log.warn, "bad_episode_report"),
                                          self._input_group)  # fmt: skip
            subs.append(port.episodes.subscription)
        return subs

    def _on_image(self, port: RobotPorts, slot: int, msg: Image) -> None:
        self._store_image(port, slot, msg, image_to_array)

    def _on_compressed(self, port: RobotPorts, slot: int, msg: CompressedImage) -> None:
        self._store_image(port, slot, msg, compressed_image_to_array)

    def _store_image(self, port: RobotPorts, slot: int, msg: Any, convert: Callable[[Any], Any]) -> None:
        timeline = port.store.timeline  # before the receive time: a jump handled in between is noticed
        recv = self._now_ns()
        stamp = stamp_to_ns(msg.header.stamp)
        try:
            image = convert(msg)
        except Exception as exc:  # anything a malformed message can raise: refuse it, never crash
            port.log.warn("bad_image", port.store.reject_image(slot, str(exc), stamp, recv))
            return
        if not image.flags.writeable:  # a view of the message's bytes: own it (torch wants writable arrays)
            image = image.copy()
        reason = port.store.put_image(slot, image, stamp, recv, msg.header.frame_id, timeline)
        if reason:
            port.log.warn("bad_image", reason)

    def _on_joint_state(self, port: RobotPorts, source: int, msg: JointState) -> None:
        timeline = port.store.timeline
        recv = self._now_ns()
        stamp = stamp_to_ns(msg.header.stamp)
        joints = self.settings.joint_sources[source]
        if port.outputs is not None:  # every joint the message names (with its topic's prefix): the guard's measured positions
            port.outputs.guard.measured.put([joints.prefix + n for n in msg.name], list(msg.position), recv)
        try:
            positions = joint_positions(msg, joints.names)
        except Exception as exc:
            port.log.warn("bad_joint_state", port.store.reject_joint_state(str(exc), stamp, recv, source))
            return
        port.store.put_joint_state(positions, stamp, recv, source, timeline)

    def _on_instruction(self, port: RobotPorts, msg: String, info: Any) -> None:
        reason = port.store.put_instruction(msg.data, self._now_ns(), sent_ns=int(info.get("source_timestamp", 0)))
        current = port.store.instruction()
        if reason:
            port.log.warn("bad_instruction", f"instruction refused: {reason}")
        elif current is not None and current != port.last_instruction:
            port.last_instruction = current
            port.log.info(f"instruction: {current[:200]!r}")

    def _on_incompatible_instruction(self, port: RobotPorts, event: QoSRequestedIncompatibleQoSInfo) -> None:
        topic = self.resolve_topic_name(port.topic(self.settings.instruction_topic))
        port.log.warn("instruction_qos", f"a publisher on {topic} offers incompatible QoS "
                                      f"({qos_policy_name_from_kind(event.last_policy_kind)}): its instructions are not "
                                      "received; publish them reliable (volatile or transient local)")
