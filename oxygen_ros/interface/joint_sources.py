"""Where each joint of the state comes from: one ``sensor_msgs/JointState`` topic, or several (one per arm, as
Interbotix's ALOHA puppets publish ``/puppet_left/joint_states`` and ``/puppet_right/joint_states`` with the same
unprefixed names), each with an optional prefix put before the names it reports.

A joint of ``joint_names`` comes from the topic whose prefix it starts with (the longest prefix; an empty prefix
takes the joints no other prefix claims). No ROS here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["JointSource", "JointSourceError", "joint_sources"]


class JointSourceError(ValueError):
    """The joint-state topics and prefixes do not divide joint_names; one line per problem."""


@dataclass(frozen=True)
class JointSource:
    topic: str
    prefix: str
    indices: tuple[int, ...]  # positions in joint_names this topic fills, in joint_names order
    names: tuple[str, ...]  # the same joints as the topic names them (without the prefix)


def joint_sources(topics: Sequence[str], prefixes: Sequence[str], joint_names: Sequence[str]) -> tuple[JointSource, ...]:
    """Each topic's joints; raises JointSourceError when a joint has no topic, a topic no joint, or the lists differ."""
    if prefixes and len(prefixes) != len(topics):
        raise JointSourceError(f"joint_state_prefixes must be empty or have one entry per joint-state topic ({len(topics)}), "
                               f"got {len(prefixes)}")  # fmt: skip
    prefixes = list(prefixes) or [""] * len(topics)
    if len(set(topics)) != len(topics):
        raise JointSourceError(f"joint-state topics repeat: {list(topics)}")
    if len(topics) > 1 and len(set(prefixes)) != len(prefixes):
        raise JointSourceError(f"joint_state_prefixes must differ between topics to tell their joints apart, got {prefixes}")
    owner: list[int] = []
    for name in joint_names:
        matching = [i for i, p in enumerate(prefixes) if name.startswith(p)]
        if not matching:
            raise JointSourceError(f"joint {name!r} starts with none of joint_state_prefixes {prefixes}")
        owner.append(max(matching, key=lambda i: len(prefixes[i])))
    sources = []
    for i, (topic, prefix) in enumerate(zip(topics, prefixes)):
        indices = tuple(j for j, o in enumerate(owner) if o == i)
        if joint_names and not indices:
            raise JointSourceError(f"joint-state topic {topic!r} (prefix {prefix!r}) provides none of joint_names")
        sources.append(JointSource(topic, prefix, indices, tuple(joint_names[j][len(prefix):] for j in indices)))
    return tuple(sources)
