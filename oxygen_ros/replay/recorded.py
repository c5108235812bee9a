"""What a bag says happened, as values at given instants: the recorded commands per output, or the achieved
joint positions (no rclpy).

A chunk's action i, for an observation stamped ``s``, belongs to the instant ``T = s + (i + 1)·step``
(``oxygen_ros.runtime.alignment``). Its recorded counterpart:

* ``joint_trajectory`` output: the trajectory in force at T — the latest one received at least half a step
  before T (a controller fed one point per step receives the point for T one step earlier) — read at T,
  linear between its points (before its first point: the first point; up to one step past its last: the
  last point; later: nothing recorded);
* ``float64_array`` / ``twist`` output (streamed: the row for T is sent one step before T): the latest message
  received by ``T - step/2``, if it is at most ``HOLD_LIMIT_S`` older than that;
* achieved states: the joint state's positions of the output's joints, linear between messages (by header
  stamp), nothing outside the recording.

Instants outside the chunk's episode (`episodes`: the episode events where the bag has them, else pauses in
the joint states) give nothing: a chunk near an episode's end is not compared with the next episode's start,
nor with states interpolated across a pause.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from oxygen_ros.interface.convert import stamp_to_ns
from oxygen_ros.runtime.outputs import OutputSpec

from .episodes import Episode
from .bagio import FLOAT64_ARRAY, JOINT_GROUP, JOINT_SINGLE, JOINT_STATE, JOINT_TRAJECTORY, STRING, TWIST_STAMPED, BagReader

HOLD_LIMIT_S = 0.1  # a streamed command older than this is not the one in force (MoveIt Servo's timeout)
EPISODE_TOPIC = "/oxygen_sim_node/episode"
COMMAND_TYPES = {"joint_trajectory": JOINT_TRAJECTORY, "float64_array": FLOAT64_ARRAY, "joint_group": JOINT_GROUP,
                 "joint_single": JOINT_SINGLE, "twist": TWIST_STAMPED}
AGAINST = ("commands", "states")


class ReferenceError(ValueError):
    """The bag cannot give the reference asked for; the message says why."""


@dataclass
class Timeline:
    """One output's recorded values: ``kind`` trajectory (messages with their points), hold (values at their
    receipt) or state (positions at their stamps)."""

    kind: str
    times_ns: np.ndarray  # receipt (trajectory, hold) or stamp (state) of each message, increasing
    values: list[np.ndarray]  # hold/state: one [D] row per message; trajectory: [points, D] per message
    point_times_ns: list[np.ndarray] = field(default_factory=list)  # trajectory: absolute time of each point

    def at(self, targets_ns: np.ndarray, step_ns: int, hold_last: bool = False) -> np.ndarray:
        """[len(targets), D] values at the instants; NaN where the recording says nothing. ``hold_last``: a
        command stays in force after its last point (a controller's view of commands still being sent)."""
        targets = np.asarray(targets_ns, dtype=np.int64)
        width = len(self.values[0][0]) if self.kind == "trajectory" else len(self.values[0])
        out = np.full((len(targets), width), np.nan)
        if self.kind == "state":
            rows = np.stack(self.values)
            inside = (targets >= self.times_ns[0]) & (targets <= self.times_ns[-1])
            for d in range(width):
                out[inside, d] = np.interp(targets[inside], self.times_ns, rows[:, d])
            return out
        sent_by = targets - step_ns // 2
        index = np.searchsorted(self.times_ns, sent_by, side="right") - 1
        if self.kind == "hold":
            rows = np.stack(self.values)
            age = sent_by - self.times_ns[np.maximum(index, 0)]
            fresh = (index >= 0) & ((age <= round(HOLD_LIMIT_S * 1e9)) | hold_last)
            out[fresh] = rows[index[fresh]]
            return out
        for m in np.unique(index[index >= 0]):
            rows, times = self.values[m], self.point_times_ns[m]
            pick = (index == m) & ((targets <= times[-1] + step_ns) | hold_last)
            for d in range(width):
                out[pick, d] = np.interp(targets[pick], times, rows[:, d])
        return out


@dataclass
class Reference:
    """The bag's side of the comparison: one timeline per output, the episode events' times."""

    against: str
    timelines: list[Timeline]
    episode_starts_ns: np.ndarray
    joint_state_names: tuple[str, ...]
    episode_ends_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def values(self, targets_ns: np.ndarray, step_ns: int, episode: Episode | None = None) -> np.ndarray:
        """[len(targets), dims] over every output, NaN where nothing was recorded or outside ``episode``."""
        out = np.concatenate([t.at(targets_ns, step_ns) for t in self.timelines], axis=1)
        if episode is not None:
            out[~episode.contains(np.asarray(targets_ns, dtype=np.int64))] = np.nan
        return out


def load_reference(reader: BagReader, outputs: Sequence[OutputSpec], topics: Sequence[str], against: str,
                   joint_state_topic: str, episode_topic: str = EPISODE_TOPIC) -> Reference:  # fmt: skip
    """Read the reference from an open bag: ``topics`` are the outputs' topics as recorded (after remapping).
    Raises ReferenceError for a command topic that is missing or of another type, joints the messages lack, or
    an output that has no achieved position (a velocity or twist output) when comparing with states."""
    if against not in AGAINST:
        raise ReferenceError(f"compare against one of {list(AGAINST)}, not {against!r}")
    bag = reader.topics
    if against == "commands":
        problems = []
        for spec, topic in zip(outputs, topics):
            want = COMMAND_TYPES[spec.type]
            if topic not in bag:
                problems.append(f"output {spec.name}'s topic {topic} is not in the bag")
            elif bag[topic].msgtype != want:
                problems.append(f"output {spec.name}'s topic {topic} has type {bag[topic].msgtype}, expected {want}")
        if problems:
            raise ReferenceError("; ".join(problems) + " (compare with the achieved joint states: --against states)")
    else:
        moving = [s.name for s in outputs if s.type == "twist" or s.interface == "velocity"]
        if moving:
            raise ReferenceError(f"outputs {moving} command velocities: no joint state to compare them with (--against commands)")
        if joint_state_topic not in bag or bag[joint_state_topic].msgtype != JOINT_STATE:
            raise ReferenceError(f"the bag has no {JOINT_STATE} on {joint_state_topic} to compare with")
    wanted = list(topics) if against == "commands" else [joint_state_topic]
    has_episodes = episode_topic in bag and bag[episode_topic].msgtype == STRING
    messages: dict[str, list] = {t: [] for t in wanted}
    starts: list[int] = []
    ends: list[int] = []
    for msg in reader.messages(wanted + ([episode_topic] if has_episodes else [])):
        obj = reader.deserialize(msg)
        if msg.topic == episode_topic and has_episodes:
            event = _json(obj.data)
            if event.get("event") == "start":
                starts.append(msg.timestamp_ns)
            elif event.get("event") == "end":
                ends.append(msg.timestamp_ns)
            if msg.topic not in messages:
                continue
        messages[msg.topic].append((msg.timestamp_ns, obj))
    if against == "commands":
        timelines = [command_timeline(spec, topic, messages[topic]) for spec, topic in zip(outputs, topics)]
        names: tuple[str, ...] = ()
    else:
        timelines, names = _state_timelines(outputs, joint_state_topic, messages[joint_state_topic])
    return Reference(against, timelines, np.asarray(sorted(starts), dtype=np.int64), names,
                     np.asarray(sorted(ends), dtype=np.int64))


def _json(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def command_timeline(spec: OutputSpec, topic: str, received: list) -> Timeline:
    """An output's commands as (receipt ns, message) pairs → its timeline (bag messages or the replay's own)."""
    if not received:
        raise ReferenceError(f"output {spec.name}'s topic {topic} has no messages")
    times = np.asarray([t for t, _ in received], dtype=np.int64)
    if spec.type in ("float64_array", "joint_group", "joint_single"):  # the values held until the next command
        rows = [np.atleast_1d(np.asarray(m.data if spec.type == "float64_array" else m.cmd, dtype=np.float64)) for _, m in received]
        bad = {len(r) for r in rows} - {len(spec.dims)}
        if bad:
            raise ReferenceError(f"{topic}: {COMMAND_TYPES[spec.type].rsplit('/', 1)[-1]} of {sorted(bad)} values for output "
                                 f"{spec.name}'s {len(spec.dims)} dims")
        return Timeline("hold", times, rows)
    if spec.type == "twist":
        rows = [np.array([m.twist.linear.x, m.twist.linear.y, m.twist.linear.z, m.twist.angular.x, m.twist.angular.y,
                          m.twist.angular.z]) for _, m in received]  # fmt: skip
        return Timeline("hold", times, rows)
    values, point_times = [], []
    for at, msg in received:
        names = list(msg.joint_names)
        missing = [j for j in spec.joints if j not in names]
        if missing or not len(msg.points):
            raise ReferenceError(f"{topic}: a JointTrajectory {'without points' if not missing else f'lacks joints {missing}'} "
                                 f"(output {spec.name} commands {list(spec.joints)})")  # fmt: skip
        columns = [names.index(j) for j in spec.joints]
        field_name = "velocities" if spec.interface == "velocity" else "positions"
        rows = np.stack([np.asarray(getattr(p, field_name), dtype=np.float64)[columns] for p in msg.points])
        start = stamp_to_ns(msg.header.stamp) or at
        values.append(rows)
        point_times.append(start + np.asarray([stamp_to_ns(p.time_from_start) for p in msg.points], dtype=np.int64))
    return Timeline("trajectory", times, values, point_times)


def _state_timelines(outputs: Sequence[OutputSpec], topic: str, received: list) -> tuple[list[Timeline], tuple[str, ...]]:
    if not received:
        raise ReferenceError(f"{topic} has no messages")
    names = tuple(str(n) for n in received[0][1].name)
    timelines = []
    stamps = np.asarray([stamp_to_ns(m.header.stamp) or at for at, m in received], dtype=np.int64)
    order = np.argsort(stamps, kind="stable")
    for spec in outputs:
        missing = [j for j in spec.joints if j not in names]
        if missing or len(spec.joints) != len(spec.dims):
            raise ReferenceError(f"output {spec.name}: joints {missing or '(none named)'} are not in the joint state "
                                 f"on {topic} (it has {list(names)})")  # fmt: skip
        rows = []
        for k in order:
            msg = received[k][1]
            index = {n: i for i, n in enumerate(msg.name)}
            rows.append(np.asarray([msg.position[index[j]] if j in index else np.nan for j in spec.joints], dtype=np.float64))
        timelines.append(Timeline("state", stamps[order], rows))
    return timelines, names
