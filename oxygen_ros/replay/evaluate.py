"""Open-loop evaluation of a policy on a recorded bag: its commands against what the robot was told or did.

The bag drives the ROS-free runtime exactly as ``oxygen-replay offline`` does (`OfflineReplay`: the node's
input store, snapshot and replan rules at the bag's times) and each chunk is compared over its whole horizon
with the reference (`recorded`): the recorded command topics, or the achieved joint states, at the instants
its actions belong to. The steps that would be executed (the node's ``n_action_steps`` with replan
``n_action_steps``, else one tick's worth, after the steps the latency skips) are the commands the offline
replay sends for the chunk — every stage of the node's output chain, whatever it holds — read back from what
it writes; the steps beyond, which no controller receives, are the chunk through the output conversions and
limits (`oxygen_ros.runtime.command_chain`), in the units of the command topics. No rclpy.

The bag is judged episode by episode (`episodes`: its episode events, else pauses in the joint states): the
ticks, the noise, the chunk in progress and the guard restart at each episode's start, and nothing is compared
outside a chunk's episode. The cameras' stamps are measured against the joint states' (`input_timing`).

Bad input raises `EvalError` (`check_bag`: before the model loads): a bag without the configured cameras or
joints, a command topic of another type, joint-state stamps that jump; then a bag shorter than one chunk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_ros.interface.convert import stamp_to_ns
from oxygen_ros.runtime import PolicyRuntime
from oxygen_ros.runtime.alignment import delay_steps
from oxygen_ros.runtime.command_chain import chunk_commands, dim_names

from .bagio import COMPRESSED_IMAGE, IMAGE, JOINT_STATE, NS_PER_S, STRING, BagError, BagReader
from .config import ReplayConfig
from .episodes import DEFAULT_GAP_S, Episode, from_events, from_gaps, tick_instants
from .input_timing import DEFAULT_WARN_S, stamp_offsets
from .metrics import ErrorTable, mean_executed_mae
from .offline import OfflineOptions, OfflineReplay, ProgressFn
from .recorded import EPISODE_TOPIC, Reference, ReferenceError, command_timeline, load_reference

CLOCK_JUMP_S = 1.0  # a joint state whose stamp moves this much against its recorded time: the clock jumped
AGAINST_CHOICES = ("auto", "commands", "states")


class EvalError(ValueError):
    """The bag or the configuration cannot be evaluated; the message says why."""


@dataclasses.dataclass
class EvalOptions:
    against: str = "auto"  # commands, states, or auto: the commands where the bag has every output's topic
    seed: int | None = None  # action noise seed (None: the file's)
    remap: Mapping[str, str] = dataclasses.field(default_factory=dict)
    engine_mode: str | None = "action_only"  # the chunk alone (text is not judged here); None: the file's
    episode_topic: str = EPISODE_TOPIC
    episode_gap_s: float = DEFAULT_GAP_S  # without episode events: joint states silent this long end an episode
    camera_offset_warn_s: float = DEFAULT_WARN_S  # warn about a camera stamped this far from the joint states


class SentCommands:
    """Where the offline replay writes its outputs during an evaluation: kept (per chunk), not written."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, int, Any]] = []

    def write(self, topic: str, msgtype: str, timestamp_ns: int, msg: Any, **_: Any) -> None:
        self.messages.append((topic, timestamp_ns, msg))


class EvalReplay(OfflineReplay):
    """One policy on one bag; :meth:`evaluate` returns the summary and keeps the per-tick table."""

    def __init__(self, bag: str | Path, config: ReplayConfig, options: EvalOptions | None = None,
                 progress: ProgressFn | None = None) -> None:  # fmt: skip
        self.eval_options = options or EvalOptions()
        super().__init__(bag, bag, config, OfflineOptions(remap=self.eval_options.remap, seed=self.eval_options.seed), progress)
        s = config.settings
        if not s.outputs:
            raise EvalError(f"{config.source}: the parameters name no controller output (output_* or joint_names "
                            "with publish_trajectory): there are no commands to judge")  # fmt: skip
        self.dims = dim_names(s.outputs)
        self.output_of = {d: spec.name for spec in s.outputs for d in dim_names([spec])}
        grippers = [("gripper" in d.lower() or "gripper" in self.output_of[d].lower()) for d in self.dims]
        for spec in s.outputs:  # a binarized output is open/closed by construction
            if spec.binarize is not None:
                grippers = [g or self.output_of[d] == spec.name for g, d in zip(grippers, self.dims)]
        self.table = ErrorTable(self.dims, grippers)
        self.reference: Reference | None = None
        self._in_force: dict[str, tuple[int, Any]] = {}  # per output topic: the last command sent before this chunk
        self.horizon = 0
        self.t0 = 0
        self._read: list[str] | None = None  # the topics to read, once the bag has been checked
        self.episodes: list[Episode] = []
        self._tick_episode: list[int] = []  # per control tick (offline's index): its episode
        self._episode: int | None = None  # the episode of the tick being run
        self._joint_times: list[int] = []  # recorded times of the joint states (pauses split episodes)
        self._stamp_lags: dict[str, list[int]] = {}  # per camera / joint-state topic: stamp − recorded time (ns)

    # -------------------------------------------------------------------------------- the replay's hooks
    def _check_output(self) -> None:
        pass

    def _open_output(self) -> Any:
        return contextlib.nullcontext(SentCommands())

    def _check_topics(self, reader: BagReader) -> list[str]:
        """The topics to read; the bag's checks ran before the model loaded (`check_bag`), the length needs its
        horizon."""
        if self._read is None:
            self._read = self._bag_topics(reader)
        s = self.config.settings
        duration_s = (reader.end_ns - reader.start_ns) / NS_PER_S
        chunk_s = self.horizon * s.step_period_s
        if reader.message_count and duration_s < chunk_s:
            raise EvalError(f"bag {self.bag} cannot be evaluated with {self.config.source}: the bag lasts {duration_s:.2f} s, "
                            f"shorter than one chunk ({self.horizon} steps of {s.step_period_s:g} s = {chunk_s:.2f} s)")  # fmt: skip
        self.t0 = reader.start_ns
        return self._read

    def check_bag(self) -> None:
        """Refuse a bag that cannot be judged before the model loads (a second, not the model's load time)."""
        if not self.bag.exists():
            raise EvalError(f"bag {self.bag} does not exist")
        with BagReader(self.bag, remap=self.options.remap) as reader:
            self._read = self._bag_topics(reader)

    def _bag_topics(self, reader: BagReader) -> list[str]:
        """Refuse a bag that cannot be judged (every problem listed); load the reference; the topics to read."""
        s, topics = self.config.settings, reader.topics
        problems: list[str] = []
        read: list[str] = []
        for slot, topic in enumerate(self.cameras):
            if not topic:
                continue
            info = topics.get(topic)
            if info is not None and info.msgtype in (IMAGE, COMPRESSED_IMAGE):  # either: the node's converter decides
                read.append(topic)
            elif info is not None:
                problems.append(f"camera topic {topic} has type {info.msgtype}, expected {IMAGE} or {COMPRESSED_IMAGE}")
            elif s.camera_optional[slot]:
                self.slot_of.pop(topic, None)
                self.warnings.append(f"optional camera {topic} is not in the bag: its slot stays masked")
            else:
                problems.append(f"camera topic {topic} is not in the bag")
        joint_topic = self.config.joint_state_topic
        if self.use_state:
            info = topics.get(joint_topic)
            if info is None:
                problems.append(f"joint state topic {joint_topic} is not in the bag")
            elif info.msgtype != JOINT_STATE:
                problems.append(f"joint state topic {joint_topic} has type {info.msgtype}, expected {JOINT_STATE}")
            else:
                read.append(joint_topic)
                problems += self._joint_state_problems(reader, joint_topic)
        instruction = topics.get(self.config.instruction_topic)
        if instruction is not None and instruction.msgtype == STRING:
            read.append(self.config.instruction_topic)
        if not problems:
            try:
                self.reference = self._load_reference(reader)
            except ReferenceError as exc:
                problems.append(str(exc))
            else:
                self.episodes = self._split_episodes(reader)
        if problems:
            have = ", ".join(f"{t} ({i.msgtype})" for t, i in sorted(topics.items())) or "nothing"
            raise EvalError(f"bag {self.bag} cannot be evaluated with {self.config.source}: " + "; ".join(problems)
                            + f". The bag has: {have} (rename recorded topics with --remap /recorded:=/configured)")  # fmt: skip
        return read

    def _joint_state_problems(self, reader: BagReader, topic: str) -> list[str]:
        """The configured joints missing from the joint states, or stamps that jump against the recorded times."""
        wanted = self.config.settings.joint_names
        offset: int | None = None
        for msg in reader.messages([topic]):
            try:
                obj = reader.deserialize(msg)
            except BagError:
                continue  # counted as damage when the replay reads it
            self._joint_times.append(msg.timestamp_ns)
            if offset is None:
                missing = [j for j in wanted if j not in list(obj.name)]
                if missing:
                    return [f"the joint states on {topic} lack the configured joints {missing} (they name {list(obj.name)})"]
            stamp = stamp_to_ns(obj.header.stamp)
            if offset is not None and abs((msg.timestamp_ns - stamp) - offset) > CLOCK_JUMP_S * NS_PER_S:
                at = (msg.timestamp_ns - reader.start_ns) / NS_PER_S
                return [f"the clock jumps at {at:.3f} s into the bag: a joint state stamped "
                        f"{(stamp - msg.timestamp_ns + offset) / NS_PER_S:+.3f} s off its recorded time "
                        "(split the bag at the jump, or record with one clock)"]  # fmt: skip
            offset = msg.timestamp_ns - stamp
        return []

    def _split_episodes(self, reader: BagReader) -> list[Episode]:
        """The episode events where the bag has them, else pauses in the joint states."""
        assert self.reference is not None
        if len(self.reference.episode_starts_ns):
            episodes = from_events(self.reference.episode_starts_ns, self.reference.episode_ends_ns, reader.end_ns)
            inside = sum(ep.end_ns - ep.start_ns for ep in episodes)
            outside_s = (reader.end_ns - reader.start_ns - inside) / NS_PER_S
            if outside_s > self.period_ns / NS_PER_S:  # recorded before the first start or between an end and a start
                self.warnings.append(f"{outside_s:.2f} s of the bag lie outside its {len(episodes)} episodes (before the "
                                     "first start event or between an end and the next start): not judged")  # fmt: skip
            return episodes
        # the last command of an episode is for a step past its last message; states end with their messages
        step_ns = round(self.config.settings.step_period_s * NS_PER_S) if self.reference.against == "commands" else 0
        return from_gaps(np.asarray(self._joint_times), self.eval_options.episode_gap_s, reader.start_ns, reader.end_ns,
                         step_ns)  # fmt: skip

    def _tick_instants(self, t0: int, end: int) -> list[int]:
        """The tick grid restarts at each episode's start (the same episode is judged the same wherever it lies)."""
        instants = tick_instants(self.episodes, self.period_ns, self.config.settings.control_rate_hz)
        self._tick_episode = [e for e, _ in instants]
        return [t for _, t in instants]

    def _tick(self, writer: Any, runtime: PolicyRuntime, store: Any, tick: int, now: int, t0: int, period_s: float) -> None:
        episode = self._tick_episode[tick]
        if self._episode is not None and episode != self._episode:
            # as the node at a simulator's episode start: the noise from the seed again (one episode gives the
            # same figures wherever it lies), no chunk to continue or replan from, commands blended from the arm
            runtime.start_episode(runtime.config.seed)
            self.guard.start_over()
            self._last_chunk_s = None
        self._episode = episode
        super()._tick(writer, runtime, store, tick, now, t0, period_s)

    def _stamped(self, topic: str, stamp_ns: int, received_ns: int) -> None:
        if stamp_ns:  # an unstamped message says nothing about its clock
            self._stamp_lags.setdefault(topic, []).append(stamp_ns - received_ns)

    def _load_reference(self, reader: BagReader) -> Reference:
        s = self.config.settings
        out_topics = [self.config.topic(spec.topic) for spec in s.outputs]  # the reader has applied --remap
        against = self.eval_options.against
        if against == "auto":
            against = "commands" if all(t in reader.topics for t in out_topics) else "states"
        return load_reference(reader, s.outputs, out_topics, against, self.config.joint_state_topic,
                              self.eval_options.episode_topic)  # fmt: skip

    def _write_chunk(self, writer: Any, runtime: PolicyRuntime, result: Any, obs: Any, now_ns: int) -> None:
        s, cfg = self.config.settings, runtime.config
        super()._write_chunk(writer, runtime, result, obs, now_ns)  # what the node sends for it, kept by the writer
        actions = np.asarray(result.actions, dtype=np.float64)
        h = len(actions)
        step_ns = round(s.step_period_s * NS_PER_S)
        base = now_ns if cfg.time_alignment == "none" else obs.stamp_ns  # where action i's instant counts from
        targets = base + np.arange(1, h + 1, dtype=np.int64) * step_ns
        assert self.reference is not None
        episode = self.episodes[self._episode or 0]
        reference = self.reference.values(targets, step_ns, episode)
        executed = np.zeros(h, dtype=bool)
        skipped = 0 if cfg.time_alignment == "none" else delay_steps(max(0.0, (now_ns - obs.stamp_ns) / 1e9), s.step_period_s)
        per_tick = max(1, round(self.period_ns / step_ns))
        executed[skipped : skipped + (runtime.n_action_steps if cfg.replan == "n_action_steps" else per_tick)] = True
        sent = self._sent(writer.messages, targets, step_ns)
        writer.messages.clear()
        predicted = np.where(executed[:, None] & np.isfinite(sent), sent, self._commands(actions))
        tick = round((now_ns - episode.start_ns) / self.period_ns)  # counted from its episode's start
        self.table.add(tick, (now_ns - self.t0) / NS_PER_S, (targets - self.t0) / NS_PER_S, predicted, reference, executed,
                       episode.index)  # fmt: skip

    def _sent(self, messages: list[tuple[str, int, Any]], targets: np.ndarray, step_ns: int) -> np.ndarray:
        """[horizon, dims]: the commands in force at the instants — those the offline replay sent since the last
        chunk (this chunk's, or a hold), else the last one before (a hold stays in force); NaN before any."""
        columns = []
        for spec in self.config.settings.outputs:
            topic = self._out(self.config.topic(spec.topic))
            received = sorted(((at, msg) for t, at, msg in messages if t == topic), key=lambda m: m[0])
            before = self._in_force.get(topic)
            if received:
                self._in_force[topic] = received[-1]
            if before is not None:
                received.insert(0, before)
            if received:
                columns.append(command_timeline(spec, topic, received).at(targets, step_ns, hold_last=True))
            else:
                columns.append(np.full((len(targets), len(spec.dims)), np.nan))
        return np.concatenate(columns, axis=1)

    def _commands(self, actions: np.ndarray) -> np.ndarray:
        """[horizon, dims]: the whole chunk through the output conversions and limits (no controller receives the
        steps past the executed ones, so no stateful stage of the chain sees them)."""
        s = self.config.settings
        commands = chunk_commands(s.outputs, actions, s.joint_names, s.joint_limits_lower, s.joint_limits_upper)
        return np.concatenate([c.values for c in commands], axis=1)

    def _write_events(self, writer: Any, events: Any, now_ns: int) -> None:
        pass  # text is not judged here

    def _finish(self, writer: Any, runtime: PolicyRuntime, last_ns: int, period_s: float) -> None:
        runtime.close()

    # ------------------------------------------------------------------------------------------- run
    def load_runtime(self) -> PolicyRuntime:
        if self.eval_options.engine_mode:
            self.config = dataclasses.replace(self.config, runtime=dataclasses.replace(
                self.config.runtime, engine_mode=self.eval_options.engine_mode))  # fmt: skip
        return super().load_runtime()

    def evaluate(self, runtime: PolicyRuntime | None = None) -> dict[str, Any]:
        """Replay and compare; returns the summary. Raises EvalError, BagError or RuntimeLoadError."""
        started = time.perf_counter()
        if self._read is None:
            self.check_bag()  # before the model loads
        runtime = runtime or self.load_runtime()
        self.horizon = runtime.model_config.action_horizon
        replay = self.run(runtime)
        wall_s = time.perf_counter() - started
        if not self.table.ticks:
            reasons = ", ".join(f"{k} {v}" for k, v in replay["skipped"].items()) or "none"
            raise EvalError(f"bag {self.bag}: no tick produced a chunk to compare (skipped ticks: {reasons}; "
                            f"{'; '.join(replay['warnings'][:3])})")  # fmt: skip
        s, cfg = self.config.settings, runtime.config
        errors = self.table.summary()
        assert self.reference is not None
        minutes = replay["bag_duration_s"] / 60
        timing, late = stamp_offsets(self._stamp_lags, [t for t in self.cameras if t], self.config.joint_state_topics,
                                     self.eval_options.camera_offset_warn_s)  # fmt: skip
        return {
            "bag": str(self.bag), "params": self.config.source, "against": self.reference.against,
            "model": cfg.checkpoint or f"preset {cfg.model_preset}", "seed": cfg.seed, "engine_mode": cfg.engine_mode,
            "control_rate_hz": s.control_rate_hz, "step_period_s": s.step_period_s, "replan": cfg.replan,
            "n_action_steps": runtime.n_action_steps, "time_alignment": cfg.time_alignment,
            "bag_duration_s": round(replay["bag_duration_s"], 3), "ticks": replay["ticks"], "chunks": self.chunks,
            "skipped": replay["skipped"], "clamped_positions": self.clamped, "engine_errors": replay["engine_errors"],
            "safety": replay.get("safety", {}),  # the output chain's holds and limit hits, as offline counts them
            **errors,
            "outputs": {spec.name: list(dim_names([spec])) for spec in s.outputs},
            "wall_s": round(wall_s, 2), "wall_s_per_bag_minute": round(wall_s / minutes, 2) if minutes > 0 else None,
            "input_timing": timing,
            "episodes": self._episode_rows(),
            "warnings": late + replay["warnings"],
            # a bag read only in part (truncated, messages that do not decode): judged on what could be read
            "damage": {"truncated": replay["truncated"], "undecodable_messages": replay["undecodable_messages"]},
        }  # fmt: skip


    def _episode_rows(self) -> list[dict[str, Any]]:
        """Per episode: its span, chunks, executed-steps MAE per dimension and its worst dimension."""
        rows = []
        for ep in self.episodes:
            part = self.table.summary(episode=ep.index)
            mean, worst = mean_executed_mae(part)
            rows.append({"index": ep.index, "source": ep.source, "start_s": round((ep.start_ns - self.t0) / NS_PER_S, 3),
                         "duration_s": round((ep.end_ns - ep.start_ns) / NS_PER_S, 3), "chunks": self.table.episodes.count(ep.index),
                         "executed_mae": {d: r["executed"]["mae"] for d, r in part["dims"].items()},
                         "mean_executed_mae": mean, "worst_dim": worst})  # fmt: skip
        return rows


def compare(a: Mapping[str, Any], b: Mapping[str, Any], scope: str = "executed") -> dict[str, Any]:
    """Per dimension which of two evaluations of one bag is closer (lower MAE over ``scope``'s steps)."""
    rows: dict[str, Any] = {}
    wins = {"a": 0, "b": 0, "tie": 0}
    for dim, ra in a["dims"].items():
        rb = b["dims"].get(dim)
        if rb is None:
            continue
        ma = (ra["executed"] if scope == "executed" else ra)["mae"]
        mb = (rb["executed"] if scope == "executed" else rb)["mae"]
        better = "tie" if ma is None or mb is None or abs(ma - mb) <= 1e-9 else ("a" if ma < mb else "b")
        wins[better] += 1
        rows[dim] = {"a": ma, "b": mb, "better": better}
    mean = {k: float(np.mean([r[k] for r in rows.values() if r[k] is not None] or [np.nan])) for k in ("a", "b")}
    return {"scope": scope, "dims": rows, "wins": wins, "mean_mae": {k: round(v, 6) for k, v in mean.items()},
            "closer": "a" if mean["a"] < mean["b"] else "b" if mean["b"] < mean["a"] else "tie"}  # fmt: skip
