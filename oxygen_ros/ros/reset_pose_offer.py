"""The policy's reset pose offered on ``~/reset_pose``: a latched ``sensor_msgs/JointState`` with one entry per joint
of each arm output it applies to, for whatever resets the robot between episodes (openpi's ALOHA client moves
both arms there; ``oxygen_ros.runtime.reset_pose`` says where it comes from)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState

from oxygen_ros.runtime.outputs import OutputSpec
from oxygen_ros.runtime.reset_pose import reset_pose, reset_targets

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


def offer_reset_pose(node: Node, topic: str, values: Mapping[str, Any], outputs: Sequence[OutputSpec]) -> Publisher | None:
    """Publish the configured reset pose on ``topic`` (a plain publisher, also in a managed node: offered while
    configured); None when no pose is set or no output takes it."""
    targets = reset_targets(reset_pose(values), outputs)
    if not targets:
        return None
    publisher = node.create_publisher(JointState, topic, LATCHED)
    publisher.publish(JointState(name=[j for spec, _ in targets for j in spec.joints],
                                 position=[x for _, pose in targets for x in pose]))  # fmt: skip
    return publisher
