"""Deterministic offline replay: a bag's inputs through the policy at their recorded times, no DDS.

The replay behaves like the node on recorded time: input messages are stored as they arrive (converted,
or refused with a reason) in the node's own `InputStore`; control ticks fall at ``t0 + n / rate`` where
``t0`` is the bag's first message; each tick takes the node's snapshot (same staleness, missing and
refused-input rules), runs `PolicyRuntime.step` and then advances the text streams by a fixed number of
decode steps (``tokens_per_frame``; wall-clock deadlines would make replays differ). Outputs go to a new
bag stamped at the tick times, on the node's topics:

- ``<node>/action_chunk``: oxygen_ros_msgs/ActionChunk (header stamp = the observation's camera stamp)
- the trajectory topic: trajectory_msgs/JointTrajectory (when enabled and joint names are set)
- ``<node>/text/<task>``: oxygen_ros_msgs/TextDelta; ``<node>/text/<task>/final``: std_msgs/String

Latency fields of the chunks are written as 0 unless ``record_latencies`` (they are wall-clock
measurements and would break byte-identical outputs); the summary reports them either way.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_ros.interface.convert import (
    action_chunk_msg,
    compressed_image_to_array,
    image_to_array,
    joint_positions,
    stamp_to_ns,
    text_delta_msg,
)
from oxygen_ros.interface.inputs import InputStore, ObservationError
from oxygen_ros.interface.outputs import float64_array_msg, to_trajectory_msg, twist_msg
from oxygen_ros.interface.settings import model_fit_problems
from oxygen_ros.runtime import InputError, PolicyRuntime
from oxygen_ros.runtime.alignment import ChunkTooLate, align_chunk, aligned_trajectory, replan_due
from oxygen_ros.runtime.outputs import limits_for, step_targets, stream_rows
from oxygen_ros.runtime.safety import SafetyGuard, hold_trajectory

from .bagio import (
    ACTION_CHUNK, COMPRESSED_IMAGE, FLOAT64_ARRAY, IMAGE, JOINT_GROUP, JOINT_SINGLE, JOINT_STATE, JOINT_TRAJECTORY,
    NS_PER_S, STRING, TEXT_DELTA, TWIST_STAMPED,
    BagError, BagMessage, BagReader, BagWriter, string_msg,
)  # fmt: skip
from .config import ReplayConfig

DEFAULT_TOKENS_PER_FRAME = 4
MAX_LISTED_SKIPS = 100
ProgressFn = Callable[[float, str], None]


class ReplayError(Exception):
    """The bag cannot drive the policy at all (e.g. no usable camera topic); the message says why."""


@dataclasses.dataclass
class OfflineOptions:
    """How to replay: output storage, text decoding per tick, draining, latencies."""

    storage: str | None = None  # output storage ("mcap" / "sqlite3"); None = from the output's suffix
    remap: Mapping[str, str] = dataclasses.field(default_factory=dict)  # applies to input and output topics
    tokens_per_frame: int | None = None  # None = the config's value, or DEFAULT_TOKENS_PER_FRAME if that is 0
    seed: int | None = None  # None = the config's seed
    drain: bool = True  # after the last tick keep decoding until every text request has finished
    record_latencies: bool = False
    overwrite: bool = False


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    arr = np.asarray(values)
    return {"count": len(values), "mean": float(arr.mean()), "p50": float(np.median(arr)),
            "p95": float(np.percentile(arr, 95)), "max": float(arr.max())}  # fmt: skip


class OfflineReplay:
    """One replay of one bag into one output bag; :meth:`run` returns the summary dict."""

    def __init__(self, bag: str | Path, output: str | Path, config: ReplayConfig, options: OfflineOptions | None = None,
                 progress: ProgressFn | None = None) -> None:  # fmt: skip
        self.bag = Path(bag)
        self.output = Path(output)
        self.config = config
        self.options = options or OfflineOptions()
        self.progress = progress
        self.warnings: list[str] = []
        s = config.settings
        self.period_ns = round(NS_PER_S / s.control_rate_hz)
        self.max_age_ns = round(s.max_observation_age_s * NS_PER_S)
        self.cameras = config.camera_topics
        self.optional = list(s.camera_optional)
        self.use_state = bool(s.joint_names)
        self.slot_of = {t: i for i, t in enumerate(self.cameras) if t}
        self.state_source = {t: i for i, t in enumerate(config.joint_state_topics)}  # joint-state topic → source
        # results
        self.skips: Counter[str] = Counter()
        self.skipped_ticks: list[dict[str, Any]] = []
        self.inputs: Counter[str] = Counter()
        self.undecodable = 0
        self.engine_errors = 0
        self.step_wall: list[float] = []
        self.decode_wall: list[float] = []
        self.prefill_s: list[float] = []
        self.action_s: list[float] = []
        self.deadline_misses = 0
        self.frames = self.chunks = self.trajectories = self.clamped = 0
        # The node's guard (oxygen_ros/runtime/safety): the bag shows the commands as the robot would get them.
        self.guard = SafetyGuard(s.outputs, s.limits, s.step_period_s, s.resume_blend_s,
                                 max(s.max_observation_age_s, 2 / s.control_rate_hz))  # fmt: skip
        self.output_counts: Counter[str] = Counter({spec.name: 0 for spec in s.outputs})  # messages per output
        self._last_chunk_s: float | None = None  # bag time of the tick of the last chunk (replan)
        self.text: dict[str, list[dict[str, Any]]] = {t.name: [] for t in config.runtime.tasks}
        self._pieces: dict[int, list[str]] = {}
        self._tokens: dict[int, int] = {}

    # --------------------------------------------------------------------------------------- checks
    def _check_topics(self, reader: BagReader) -> list[str]:
        """Warn about configured inputs the bag lacks or has with another type; return the topics to read."""
        topics = reader.topics
        s = self.config.settings
        have = ", ".join(f"{t} ({i.msgtype})" for t, i in sorted(topics.items())) or "nothing"
        usable: list[str] = []
        for slot, topic in enumerate(self.cameras):
            if not topic:
                continue
            want = COMPRESSED_IMAGE if s.camera_compressed[slot] else IMAGE
            info = topics.get(topic)
            problem = None
            if info is None:
                problem = "is not in the bag"
            elif info.msgtype != want:
                problem = f"has type {info.msgtype} in the bag, expected {want}; its messages are ignored"
            if problem is None:
                usable.append(topic)
                continue
            self.slot_of.pop(topic, None)
            note = "" if self.optional[slot] else " (the node would skip every tick: camera_optional is false)"
            self.optional[slot] = True
            self.warnings.append(f"camera slot {slot} topic {topic} {problem}; the slot is masked for this replay{note}")
        if not usable:
            configured = [t for t in self.cameras if t]
            raise ReplayError(
                f"bag {self.bag} has none of the camera topics {configured} with an image type (it has: {have});"
                " map recorded topics with --remap /recorded:=/configured"
            )
        read = list(usable)
        for topic, want, needed in (*((t, JOINT_STATE, self.use_state) for t in self.state_source),
                                    (self.config.instruction_topic, STRING, False)):  # fmt: skip
            info = topics.get(topic)
            if info is not None and info.msgtype == want:
                read.append(topic)
            elif info is not None:
                self.warnings.append(f"topic {topic} has type {info.msgtype} in the bag, expected {want}; ignored")
            elif needed:
                self.warnings.append(f"joint state topic {topic} is not in the bag: every tick will be skipped")
            elif topic == self.config.instruction_topic and not s.default_instruction.strip():
                self.warnings.append(f"instruction topic {topic} is not in the bag and default_instruction is empty")
        return read

    # ---------------------------------------------------------------------------------------- inputs
    def _feed(self, store: InputStore, reader: BagReader, msg: BagMessage) -> None:
        """What the node's subscription callbacks do, with the recorded time as the receive time."""
        try:
            obj = reader.deserialize(msg)
        except BagError as exc:
            self.undecodable += 1
            if self.undecodable <= 3:
                self.warnings.append(str(exc))
            return
        self.inputs[msg.topic] += 1
        recv = msg.timestamp_ns
        slot = self.slot_of.get(msg.topic)
        if slot is not None:
            stamp = stamp_to_ns(obj.header.stamp)
            convert = compressed_image_to_array if msg.msgtype == COMPRESSED_IMAGE else image_to_array
            try:
                # rosbags hands out read-only buffers; the model wants arrays it may own (torch warns otherwise).
                image = np.require(convert(obj), requirements="W")
            except Exception as exc:  # noqa: BLE001 - as the node: anything a malformed message raises refuses it
                store.reject_image(slot, str(exc), stamp, recv)
                return
            store.put_image(slot, image, stamp, recv, str(obj.header.frame_id))
            self._stamped(msg.topic, stamp, recv)
        elif msg.topic in self.state_source:
            stamp = stamp_to_ns(obj.header.stamp)
            self._stamped(msg.topic, stamp, recv)
            source = self.state_source[msg.topic]
            prefix = self.config.settings.joint_sources[source].prefix
            self.guard.measured.put([prefix + n for n in obj.name], list(obj.position), recv)
            try:
                positions = joint_positions(obj, self.config.settings.joint_sources[source].names)
            except Exception as exc:  # noqa: BLE001 - as the node
                store.reject_joint_state(str(exc), stamp, recv, source)
                return
            store.put_joint_state(positions, stamp, recv, source)
        elif msg.topic == self.config.instruction_topic:
            store.put_instruction(str(obj.data), recv)

    def _stamped(self, topic: str, stamp_ns: int, received_ns: int) -> None:
        """A camera image or joint state taken in, with its header stamp and recorded time (for tools that look
        at the inputs' timing)."""

    def _skip(self, tick: int, now_ns: int, t0: int, kind: str, reason: str) -> None:
        self.skips[kind] += 1
        if len(self.skipped_ticks) < MAX_LISTED_SKIPS:
            self.skipped_ticks.append({"tick": tick, "time_s": round((now_ns - t0) / NS_PER_S, 9), "kind": kind, "reason": reason})

    # --------------------------------------------------------------------------------------- outputs
    def _out(self, topic: str) -> str:
        return self.options.remap.get(topic, topic)

    def _write_events(self, writer: BagWriter, events: list, now_ns: int) -> None:
        publish = self.config.settings.publish_text
        for ev in events:
            if publish:
                msg = text_delta_msg(
                    request_id=ev.request_id, task=ev.task, seq=ev.seq, text=ev.text, token_ids=ev.token_ids,
                    final=ev.final, finish_reason=ev.finish_reason, stamp=now_ns, source_stamp=ev.frame_stamp_ns,
                    source_frame_seq=ev.frame_seq,
                )  # fmt: skip
                writer.write(self._out(self.config.text_topic(ev.task)), TEXT_DELTA, now_ns, msg)
            self._pieces.setdefault(ev.request_id, []).append(ev.text)
            self._tokens[ev.request_id] = self._tokens.get(ev.request_id, 0) + len(ev.token_ids)
            if ev.final:
                full = "".join(self._pieces.pop(ev.request_id))
                if publish:
                    writer.write(self._out(self.config.final_text_topic(ev.task)), STRING, now_ns, string_msg(writer.typestore, full))
                self.text.setdefault(ev.task, []).append({
                    "request_id": ev.request_id, "frame_seq": ev.frame_seq, "frame_stamp_ns": ev.frame_stamp_ns,
                    "text": full, "finish_reason": ev.finish_reason, "tokens": self._tokens.pop(ev.request_id),
                })  # fmt: skip

    def _write_chunk(self, writer: BagWriter, runtime: PolicyRuntime, result: Any, obs: Any, now_ns: int) -> None:
        s = self.config.settings
        actions = result.actions
        record = self.options.record_latencies
        latency_s = max(0.0, (now_ns - obs.stamp_ns) / 1e9)  # observation → this tick, on the bag's clock
        n_steps = runtime.n_action_steps
        chunk = action_chunk_msg(
            actions, stamp=obs.stamp_ns, frame_seq=result.tick.frame_seq, step_period_s=s.step_period_s,
            joint_names=s.joint_names, prefill_latency_s=result.tick.prefill_s if record else 0.0,
            action_latency_s=result.tick.action_s if record else 0.0, engine_mode=runtime.config.engine_mode,
            frame_id=obs.frame_id, latency_s=latency_s, n_action_steps=n_steps,
        )  # fmt: skip
        writer.write(self._out(self.config.action_chunk_topic), ACTION_CHUNK, now_ns, chunk)
        self.chunks += 1
        if s.publish_trajectory and s.outputs:
            try:  # the node's rules (time_alignment, streaming), so the bag shows what each controller would get
                self._write_outputs(writer, runtime, actions, obs.stamp_ns, latency_s, now_ns)
            except ChunkTooLate:
                runtime.forget_chunk()

    def _write_outputs(self, writer: BagWriter, runtime: PolicyRuntime, actions: np.ndarray, stamp_ns: int,
                       latency_s: float, now_ns: int) -> None:  # fmt: skip
        """Every controller output: a trajectory per chunk; a streamed output's rows at the instants they become
        due, up to the next chunk (the next tick, or n_action_steps steps with replan n_action_steps). A
        position_step output's targets start from the joints as measured at the tick (the node takes the latest at
        each instant; the bag's later states are not read yet here)."""
        s, cfg = self.config.settings, runtime.config
        n_steps = runtime.n_action_steps
        refusal = self.guard.check_chunk({spec.name: spec.values(actions) for spec in s.outputs})
        if refusal is not None:  # counted by output, joint and reason (the summary's safety.refusals)
            self._hold(writer, now_ns, "bad_output", str(refusal))
            return
        messages = []
        for spec in s.outputs:
            if spec.type != "joint_trajectory":
                continue
            limits = limits_for(spec, s.joint_names, s.joint_limits_lower, s.joint_limits_upper)
            timed, clamped = aligned_trajectory(spec.values(actions), spec.joints, s.step_period_s, limits, stamp_ns,
                                                latency_s, n_steps, cfg.time_alignment)  # fmt: skip
            self.clamped += clamped
            guarded = self.guard.trajectory(spec, timed, now_ns)
            if guarded is not None:
                messages.append((now_ns, spec, JOINT_TRAJECTORY, to_trajectory_msg(guarded, spec.interface)))
        streamed = [spec for spec in s.outputs if spec.streamed]
        if streamed:
            timing = align_chunk(len(actions), s.step_period_s, stamp_ns, latency_s, n_steps, cfg.time_alignment)
            until = now_ns + (self.period_ns if cfg.replan == "tick" else round(n_steps * s.step_period_s * NS_PER_S))
            for row, at in stream_rows(timing.first, timing.times_s, timing.stamp_ns or now_ns, now_ns, until):
                for spec in streamed:
                    values = spec.values(actions[row])
                    if spec.steps:  # from the joints as last measured (the bag's later states are not read yet)
                        values = step_targets(values, self.guard.measured_of(spec))
                        if values is None:
                            continue
                    messages.append((at, spec, *_streamed_message(spec, self.guard.stream(spec, values, at), at)))
        self.guard.state.resumed()
        self._write_messages(writer, messages)

    def _write_messages(self, writer: BagWriter, messages: list[tuple[int, Any, str, Any]]) -> None:
        for at, spec, msgtype, msg in messages:
            writer.write(self._out(self.config.topic(spec.topic)), msgtype, at, msg)
            self.output_counts[spec.name] += 1
        self.trajectories += sum(1 for _, spec, _, _ in messages if spec.type == "joint_trajectory")

    def _hold(self, writer: BagWriter, now_ns: int, kind: str, reason: str) -> None:
        """Every output to its hold command, as the node sends it when a chunk is no command at all (each time:
        while holding already too, the tick's answer)."""
        s = self.config.settings
        if not (s.publish_trajectory and s.outputs):
            return
        self.guard.hold(kind, reason, now_ns)
        messages = []
        for spec in s.outputs:
            command = self.guard.hold_command(spec, now_ns)
            if spec.type == "joint_trajectory":
                held = hold_trajectory(spec, command, s.step_period_s)
                if held is not None:
                    messages.append((now_ns, spec, JOINT_TRAJECTORY, to_trajectory_msg(held, spec.interface)))
            elif command is not None:
                messages.append((now_ns, spec, *_streamed_message(spec, command, now_ns)))
        self._write_messages(writer, messages)

    # ------------------------------------------------------------------------------------------ run
    def load_runtime(self) -> PolicyRuntime:
        """The runtime with the replay's determinism settings (fixed decode steps per tick, seed)."""
        cfg = dataclasses.replace(self.config.runtime)
        if self.options.seed is not None:
            cfg.seed = self.options.seed
        if self.options.tokens_per_frame is not None:
            cfg.tokens_per_frame = self.options.tokens_per_frame
        elif cfg.tokens_per_frame == 0:
            cfg.tokens_per_frame = DEFAULT_TOKENS_PER_FRAME
        if cfg.tokens_per_frame < 1:
            raise ReplayError("offline replay needs tokens_per_frame >= 1 (deadline-driven decoding is not reproducible)")
        return PolicyRuntime.load(cfg)

    def run(self, runtime: PolicyRuntime | None = None) -> dict[str, Any]:
        """Replay; returns the summary. Raises BagError / ReplayError / RuntimeLoadError before writing
        anything when the bag or the configuration cannot be used."""
        wall_start = time.perf_counter()
        self._check_output()
        with BagReader(self.bag, remap=self.options.remap) as reader:
            topics = self._check_topics(reader)
            if runtime is None:
                runtime = self.load_runtime()
            elif runtime.config.engine_mode == "oxygen" and runtime.config.tokens_per_frame < 1:
                raise ReplayError("offline replay needs a runtime with tokens_per_frame >= 1 (deadlines are not reproducible)")
            store = self._input_store(runtime)
            s = self.config.settings
            t0, end = reader.start_ns, reader.end_ns
            instants = self._tick_instants(t0, end) if reader.message_count else []
            n_ticks = len(instants)
            period_s = self.period_ns / NS_PER_S
            messages = reader.messages(topics)
            pending = next(messages, None)
            now = t0
            with self._open_output() as writer:
                for tick, now in enumerate(instants):
                    while pending is not None and pending.timestamp_ns <= now:
                        self._feed(store, reader, pending)
                        pending = next(messages, None)
                    self._tick(writer, runtime, store, tick, now, t0, period_s)
                    if self.progress is not None:
                        self.progress((tick + 1) / n_ticks, f"tick {tick + 1}/{n_ticks}, {self.chunks} chunks")
                self._finish(writer, runtime, now, period_s)
            self.warnings = list(reader.warnings) + self.warnings
            truncated = reader.truncated
        stats = runtime.stats()
        return self._summary(runtime, stats, n_ticks, t0, end, truncated, time.perf_counter() - wall_start)

    def _tick_instants(self, t0: int, end: int) -> list[int]:
        """The control ticks' bag times: from the bag's first message, every period, to its last."""
        rate = self.config.settings.control_rate_hz
        return [t0 + round(k * NS_PER_S / rate) for k in range((end - t0) // self.period_ns + 1)]

    def _check_output(self) -> None:
        if self.output.resolve() == self.bag.resolve():
            raise ReplayError(f"the output bag {self.output} is the input bag; choose another output")

    def _open_output(self) -> Any:
        """Where the outputs go (a context manager; tools that keep the chunks themselves override it)."""
        return BagWriter(self.output, storage=self.options.storage, overwrite=self.options.overwrite)

    def _input_store(self, runtime: PolicyRuntime) -> InputStore:
        """The node's input store: configured slots, padded with masked slots up to the model's."""
        s = self.config.settings
        slots = runtime.num_image_slots
        problems = model_fit_problems(s, slots, runtime.action_dim, runtime.state_dim, runtime.needs_state)
        if problems:
            raise ReplayError("parameters do not fit the model: " + "; ".join(problems))
        pad = slots - len(self.cameras)
        return InputStore([*self.cameras, *[""] * pad], [*self.optional, *[True] * pad],
                          [*s.camera_sizes, *[(0, 0)] * pad], self.use_state, s.max_instruction_chars,
                          [(t, j.indices) for t, j in zip(self.state_source, s.joint_sources)])  # fmt: skip

    def _step(self, writer: BagWriter, runtime: PolicyRuntime, store: InputStore, obs: Any, tick: int, now: int,
              t0: int, period_s: float, work_start: float) -> None:  # fmt: skip
        s = self.config.settings
        try:
            frame = runtime.make_frame(obs.images, obs.state, obs.instruction, obs.stamp_ns)
        except InputError as exc:
            store.count(f"skipped_invalid_{exc.kind}")
            self._skip(tick, now, t0, f"invalid_{exc.kind}", str(exc))
        else:
            try:
                # offline, the observation's age at this tick is the latency the chunk will have
                result = runtime.step(frame, s.step_period_s, max(0.0, (now - obs.stamp_ns) / 1e9))
                self._last_chunk_s = now / 1e9
                self.frames += 1
                self._write_chunk(writer, runtime, result, obs, now)
            except Exception as exc:  # noqa: BLE001 - as the node: count, no chunk, keep going (the outputs hold)
                self._hold(writer, now, "bad_output", f"{type(exc).__name__}: {exc}")
                self._engine_error(tick, now, t0, "control tick", exc)
                result = None
            if result is not None:
                self._write_events(writer, result.events, now)
                self.prefill_s.append(result.tick.prefill_s)
                self.action_s.append(result.tick.action_s)
            work = time.perf_counter() - work_start
            self.step_wall.append(work)
            if work > period_s:
                self.deadline_misses += 1

    def _tick(self, writer: BagWriter, runtime: PolicyRuntime, store: InputStore, tick: int, now: int, t0: int,
              period_s: float) -> None:  # fmt: skip
        s = self.config.settings
        work_start = time.perf_counter()
        # With replan = n_action_steps a tick between chunks only advances the text.
        if replan_due(now / 1e9, self._last_chunk_s, runtime.config.replan, runtime.n_action_steps, s.step_period_s,
                      period_s / 2):  # fmt: skip
            try:
                obs = store.snapshot(now, self.max_age_ns, s.default_instruction)
            except ObservationError as exc:
                self._skip(tick, now, t0, exc.kind, str(exc))
            else:
                self._step(writer, runtime, store, obs, tick, now, t0, period_s, work_start)
        decode_start = time.perf_counter()
        try:
            events = runtime.decode()
        except Exception as exc:  # noqa: BLE001 - as the node
            self._engine_error(tick, now, t0, "text decode", exc)
            return
        if events:
            self.decode_wall.append(time.perf_counter() - decode_start)
        self._write_events(writer, events, now)

    def _engine_error(self, tick: int, now: int, t0: int, where: str, exc: BaseException) -> None:
        message = f"{where} failed: {type(exc).__name__}: {exc}"
        self.engine_errors += 1
        if where == "control tick":
            self._skip(tick, now, t0, "engine_error", message)
        if self.engine_errors <= 3:
            self.warnings.append(f"tick {tick}: {message}")

    def _finish(self, writer: BagWriter, runtime: PolicyRuntime, last_ns: int, period_s: float) -> None:
        """Drain live text at further tick times (or cancel it), so every stream ends with a final delta."""
        now = last_ns
        if self.options.drain:
            longest = max((t.max_tokens for t in self.config.runtime.tasks), default=1)
            k = max(runtime.config.tokens_per_frame, 1)
            for _ in range(math.ceil(longest / k) + 2):
                st = runtime.stats()
                if st.live_requests == 0:
                    break
                now += self.period_ns
                self._write_events(writer, runtime.decode(), now)
        self._write_events(writer, runtime.close(), now)

    def _summary(self, runtime: PolicyRuntime, stats: Any, n_ticks: int, t0: int, end: int, truncated: bool,
                 wall_s: float) -> dict[str, Any]:  # fmt: skip
        s, cfg = self.config.settings, runtime.config
        return {
            "bag": str(self.bag),
            "output": str(self.output),
            "params": self.config.source,
            "node": self.config.node_fqn,
            "engine_mode": cfg.engine_mode,
            "tokens_per_frame": cfg.tokens_per_frame,
            "seed": cfg.seed,
            "control_rate_hz": s.control_rate_hz,
            "bag_start_ns": t0,
            "bag_duration_s": (end - t0) / NS_PER_S,
            "truncated": truncated,
            "ticks": n_ticks,
            "frames": self.frames,
            "chunks": self.chunks,
            "trajectories": self.trajectories,
            "clamped_positions": self.clamped,
            "safety": {"holds": dict(self.guard.state.holds),
                       "limit_hits": {f"{o}/{j}/{k}": n for (o, j, k), n in sorted(self.guard.hits.snapshot().items())},
                       "refusals": self.guard.refusals.summary()},
            "skipped": dict(sorted(self.skips.items())),
            "skipped_ticks": self.skipped_ticks,
            "inputs": dict(sorted(self.inputs.items())),
            "undecodable_messages": self.undecodable,
            "engine_errors": self.engine_errors,
            "prompts_truncated": runtime.prompts_truncated,
            "model": {
                "layout": runtime.checkpoint_info.layout, "chunk_length": runtime.model_config.action_horizon,
                "n_action_steps": runtime.checkpoint_info.n_action_steps, "prompt_format": runtime.prompt_format,
                "resize_mode": runtime.resize_mode, "normalization": runtime.normalizer.describe() if runtime.normalizer else "none",
                "camera_slots": list(runtime.image_slot_names), "dtype": runtime.dtype,
                "dtype_choice": runtime.dtype_line,
            },
            "tokens": stats.tokens_generated,
            "decode_steps": stats.decode_steps,
            "refused_requests": stats.refused_total,
            "text": self.text,
            "topics": {
                "action_chunk": self._out(self.config.action_chunk_topic),
                "trajectory": self._out(self.config.trajectory_topic) if self.trajectories and not s.explicit_outputs else "",
                "outputs": {spec.name: {"topic": self._out(self.config.topic(spec.topic)), "type": spec.type,
                                        "dims": list(spec.dims), "messages": self.output_counts[spec.name]}
                            for spec in s.outputs},
                "text": {t: self._out(self.config.text_topic(t)) for t in self.text},
                "final_text": {t: self._out(self.config.final_text_topic(t)) for t in self.text},
            },
            # Wall-clock measurements: informational, they differ from run to run.
            "timing": {
                "control_period_s": self.period_ns / NS_PER_S,
                "deadline_misses": self.deadline_misses,
                "tick_work_s": _stats(self.step_wall),
                "prefill_s": _stats(self.prefill_s),
                "action_s": _stats(self.action_s),
                "decode_s": _stats(self.decode_wall),
                "wall_s": wall_s,
            },
            "warnings": self.warnings + self._refusal_warnings(),
        }

    def _refusal_warnings(self) -> list[str]:
        """Refused chunks said once, with the last reason (each is counted in the summary's safety.refusals)."""
        line = self.guard.refusals.line()
        if not line:
            return []
        return [f"{line}: no controller command from them, the outputs held (last: {self.guard.refusals.last}); "
                "the model's actions and the params file's limits disagree (docs/safety.md)"]


def replay_offline(bag: str | Path, output: str | Path, config: ReplayConfig, options: OfflineOptions | None = None,
                   progress: ProgressFn | None = None, runtime: PolicyRuntime | None = None) -> dict[str, Any]:  # fmt: skip
    """Replay ``bag`` through the policy into the new bag ``output``; returns the summary (see module doc)."""
    return OfflineReplay(bag, output, config, options, progress).run(runtime)


def default_output(bag: str | Path) -> Path:
    """``<bag>_oxygen.mcap`` next to the input (a folder bag keeps its name as the stem)."""
    p = Path(bag)
    stem = p.name if p.is_dir() else p.stem
    return p.parent / f"{stem}_oxygen.mcap"


def _streamed_message(spec: Any, values: np.ndarray, at_ns: int) -> tuple[str, Any]:
    """A streamed output's command as the node publishes it: (bag message type, message)."""
    if spec.type == "twist":
        return TWIST_STAMPED, twist_msg(values, spec.frame, at_ns)
    if spec.type in ("joint_group", "joint_single"):
        from oxygen_ros.interface.interbotix import interbotix_msg

        return (JOINT_GROUP if spec.type == "joint_group" else JOINT_SINGLE), interbotix_msg(spec.type, spec.group, values)
    return FLOAT64_ARRAY, float64_array_msg(values)
