"""`OxygenNode`: the rclpy node around `PolicyRuntime`.

Threading: subscription callbacks (a reentrant group) only convert and store the latest inputs. The model
work runs in ONE dedicated thread, so the runtime is never entered twice: the control timer only wakes it,
and it then runs the tick (observation → `runtime.step` → ActionChunk / JointTrajectory) followed by the
batched decoder (`runtime.decode` until shortly before the next tick). Model work is deliberately not an
executor callback: rclpy's MultiThreadedExecutor busy-spins while a timer is ready but its callback group
is busy, holding the GIL. (`main` also shortens the GIL switch interval; see there.)
Diagnostics run in their own group from numbers the model thread records.

Every time is the node clock's (`use_sim_time` and bag replay work). Bad inputs give a throttled warning,
a counter in /diagnostics and no chunk for that tick; the node keeps running. All model and KV logic lives
behind the runtime facade.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

from diagnostic_msgs.msg import DiagnosticArray
from oxygen_ros_msgs.msg import ActionChunk, TextDelta
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rcl_interfaces.msg import SetParametersResult
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.runtime import InputError, PolicyRuntime, RuntimeConfig
from oxygen_ros.runtime.alignment import ChunkTooLate, aligned_trajectory, replan_due

from . import params as P
from .convert import action_chunk_msg, compressed_image_to_array, image_to_array, joint_positions, stamp_to_ns, text_delta_msg
from .diagnostics import Diagnostics, diagnostic_array
from .inputs import InputStore, Observation, ObservationError
from .outputs import JointLimits, final_text_topic, text_topic, to_trajectory_msg

__all__ = ["OxygenNode", "RuntimeLoader"]

RuntimeLoader = Callable[[RuntimeConfig], Any]  # PolicyRuntime.load or a test double

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
TEXT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)  # deltas must not be lost
# A latched instruction: late joiners get the last one. Publishers must be transient local too.
INSTRUCTION_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
WARN_THROTTLE_S = 2.0
MIN_DECODE_SHARE = 0.1  # decode budget per tick, as a share of the period, when ticks leave no slack
_DIGITS = re.compile(r"[0-9.]+")
_MAX_THROTTLE_KEYS = 256


@dataclass
class _TextPublishers:
    delta: Publisher
    final: Publisher


class OxygenNode(Node):
    """The policy node. Raises `params.ConfigError` for bad parameters and whatever `runtime_loader`
    raises (`RuntimeLoadError`) when the model cannot be loaded."""

    def __init__(self, node_name: str = "oxygen_node", *, runtime_loader: RuntimeLoader | None = None, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._values = P.declare_parameters(self)
        self._warn_unknown_overrides()
        self.settings, runtime_config = P.settings_from_values(self._values)
        self.runtime = (runtime_loader or PolicyRuntime.load)(runtime_config)
        self._check_fits_model()
        s = self.settings
        unused = self.runtime.num_image_slots - len(s.camera_topics)  # slots past the list: no camera, masked
        self.store = InputStore(
            [*s.camera_topics, *[""] * unused],
            [*s.camera_optional, *[True] * unused],
            [*s.camera_sizes, *[(0, 0)] * unused],
            use_state=bool(s.joint_names),
            max_instruction_chars=s.max_instruction_chars,
        )
        self.diag = Diagnostics(self._chunk_rate_hz())
        self._limits = JointLimits(s.joint_limits_lower, s.joint_limits_upper)
        self._loggers: dict[tuple[str, str], Any] = {}
        self._text_parts: dict[int, list[str]] = {}
        self._last_instruction = ""
        self._tick_wanted = threading.Event()
        self._last_chunk_s: float | None = None  # node-clock time of the tick of the last chunk
        self._last_latency_s = 0.0  # observation → publication of the last chunk
        self._stopping = threading.Event()

        self._timer_group = MutuallyExclusiveCallbackGroup()
        self._input_group = ReentrantCallbackGroup()
        self._diag_group = MutuallyExclusiveCallbackGroup()
        self._create_publishers()
        self._create_subscriptions()
        self._create_timers()
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._after_set_parameters)
        self._model_thread = threading.Thread(target=self._model_loop, name="oxygen-model", daemon=True)
        self._model_thread.start()
        self._log_start()

    # --------------------------------------------------------------------------------- set-up
    def _warn_unknown_overrides(self) -> None:
        # rclpy silently ignores overrides of undeclared parameters; a typo in a params file would go unnoticed.
        overrides = getattr(self, "_parameter_overrides", {}) or {}
        unknown = sorted(n for n in overrides if not self.has_parameter(n) and not n.startswith("qos_overrides."))
        if unknown:
            self.get_logger().warning(f"ignoring unknown parameters {unknown} (misspelled? see config/demo.yaml)")

    def _chunk_rate_hz(self) -> float:
        """The chunk rate diagnostics expect: the control rate, or one chunk per n_action_steps steps."""
        s, rt = self.settings, self.runtime
        if rt.config.replan == "tick":
            return s.control_rate_hz
        return min(s.control_rate_hz, 1.0 / (rt.n_action_steps * s.step_period_s))

    def _check_fits_model(self) -> None:
        rt = self.runtime
        problems = P.model_fit_problems(self.settings, rt.num_image_slots, rt.action_dim, rt.state_dim)
        if problems:
            raise P.ConfigError("parameters do not fit the model: " + "; ".join(problems))

    def _create_publishers(self) -> None:
        self._chunk_pub = self.create_publisher(ActionChunk, "~/action_chunk", RELIABLE)
        self._trajectory_pub = (
            self.create_publisher(JointTrajectory, self.settings.trajectory_topic, RELIABLE) if self.settings.joint_names else None
        )
        self._text_pubs = {
            task.name: _TextPublishers(
                self.create_publisher(TextDelta, text_topic(task.name), TEXT_QOS),
                self.create_publisher(String, final_text_topic(task.name), RELIABLE),
            )
            for task in self.runtime.config.tasks
        }
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", RELIABLE)

    def _create_subscriptions(self) -> None:
        s = self.settings
        self._input_subs = []
        for slot, topic in enumerate(s.camera_topics):
            if not topic:
                continue
            msg_type, callback = (CompressedImage, self._on_compressed) if s.camera_compressed[slot] else (Image, self._on_image)
            self._input_subs.append(
                self.create_subscription(msg_type, topic, partial(callback, slot), qos_profile_sensor_data,
                                         callback_group=self._input_group)
            )
        if s.joint_names:
            self._input_subs.append(
                self.create_subscription(JointState, s.joint_state_topic, self._on_joint_state, qos_profile_sensor_data,
                                         callback_group=self._input_group)
            )
        self._input_subs.append(
            self.create_subscription(String, s.instruction_topic, self._on_instruction, INSTRUCTION_QOS,
                                     callback_group=self._input_group)
        )

    def _create_timers(self) -> None:
        s = self.settings
        # The control timer only wakes the model thread (node clock: follows /clock with use_sim_time).
        self._control_timer = self.create_timer(s.control_period_s, self._tick_wanted.set, callback_group=self._timer_group)
        self._diag_timer = self.create_timer(s.diagnostics_period_s, self._on_diagnostics, callback_group=self._diag_group)

    def _model_loop(self) -> None:
        """The model thread: each control tick, the tick and then text decoding in the slack before the next."""
        while not self._stopping.is_set():
            if not self._tick_wanted.wait(timeout=0.1):
                continue
            self._tick_wanted.clear()
            if self._stopping.is_set():
                break
            self._on_tick()
            if self.runtime.config.engine_mode == "oxygen" and self.runtime.config.tasks:
                self._on_decode()

    def _log_start(self) -> None:
        s, rt = self.settings, self.runtime
        cameras = ", ".join(f"{i}:{t or '(masked)'}{' [compressed]' if t and s.camera_compressed[i] else ''}"
                            for i, t in enumerate(s.camera_topics))
        tasks = ", ".join(f"{t.name}/every {t.every_n_frames}" for t in rt.config.tasks) or "none"
        model = rt.config.checkpoint or f"preset {rt.config.model_preset}"
        self.get_logger().info(
            f"ready: model {model} ({rt.config.engine_mode}, {rt.config.device}, {rt.config.dtype}); cameras {cameras}; "
            f"{len(s.joint_names)} joints; {s.control_rate_hz:g} Hz; text tasks {tasks}"
        )
        if s.publish_trajectory and not s.joint_names:
            self.get_logger().warning("publish_trajectory is true but joint_names is empty: no JointTrajectory will be published")

    # --------------------------------------------------------------------------- input callbacks
    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _on_image(self, slot: int, msg: Image) -> None:
        self._store_image(slot, msg, image_to_array)

    def _on_compressed(self, slot: int, msg: CompressedImage) -> None:
        self._store_image(slot, msg, compressed_image_to_array)

    def _store_image(self, slot: int, msg: Any, convert: Callable[[Any], Any]) -> None:
        recv = self._now_ns()
        stamp = stamp_to_ns(msg.header.stamp)
        try:
            image = convert(msg)
        except Exception as exc:  # anything a malformed message can raise: refuse it, never crash
            self._warn("bad_image", self.store.reject_image(slot, str(exc), stamp, recv))
            return
        if not image.flags.writeable:  # a view of the message's bytes: own it (torch wants writable arrays)
            image = image.copy()
        reason = self.store.put_image(slot, image, stamp, recv, msg.header.frame_id)
        if reason:
            self._warn("bad_image", reason)

    def _on_joint_state(self, msg: JointState) -> None:
        recv = self._now_ns()
        stamp = stamp_to_ns(msg.header.stamp)
        try:
            positions = joint_positions(msg, self.settings.joint_names)
        except Exception as exc:
            self._warn("bad_joint_state", self.store.reject_joint_state(str(exc), stamp, recv))
            return
        self.store.put_joint_state(positions, stamp, recv)

    def _on_instruction(self, msg: String) -> None:
        reason = self.store.put_instruction(msg.data, self._now_ns())
        if reason:
            self._warn("bad_instruction", f"instruction refused: {reason}")
        elif msg.data.strip() != self._last_instruction:
            self._last_instruction = msg.data.strip()
            self.get_logger().info(f"instruction: {self._last_instruction[:200]!r}")

    def _warn(self, kind: str, message: str) -> None:
        """A warning throttled per problem: a repeating problem logs every WARN_THROTTLE_S, a new one at once.

        rclpy throttles per logger object and call site, so each problem (the kind plus the message with its
        numbers removed) gets its own child logger object named after the kind.
        """
        key = (kind, _DIGITS.sub("#", message)) if len(self._loggers) < _MAX_THROTTLE_KEYS else (kind, "")
        logger = self._loggers.get(key)
        if logger is None:
            logger = self._loggers[key] = self.get_logger().get_child(kind)
        logger.warning(message, throttle_duration_sec=WARN_THROTTLE_S)

    # ------------------------------------------------------------------------------ model work
    def _on_tick(self) -> None:
        s, rt = self.settings, self.runtime
        now_s = self._now_ns() / 1e9
        if not replan_due(now_s, self._last_chunk_s, rt.config.replan, rt.n_action_steps, s.step_period_s,
                          slack_s=s.control_period_s / 2):  # fmt: skip
            return  # the current chunk still runs: replanning every n_action_steps steps
        start = time.perf_counter()
        self.diag.tick_started(self._now_ns())
        try:
            obs = self.store.snapshot(self._now_ns(), int(s.max_observation_age_s * 1e9), s.default_instruction)
        except ObservationError as exc:
            self._skip(exc.kind, str(exc))
            return
        try:
            frame = self.runtime.make_frame(obs.images, obs.state, obs.instruction, obs.stamp_ns)
        except InputError as exc:
            self.store.count(f"skipped_invalid_{exc.kind}")
            self._skip(f"invalid_{exc.kind}", str(exc))
            return
        try:
            # With real-time chunking the new chunk continues the last one; its delay is the last measured latency.
            result = self.runtime.step(frame, s.step_period_s, self._last_latency_s)
            self._last_chunk_s = now_s
        except Exception as exc:  # a robot never sees a traceback: log, count, no chunk, keep running
            self._engine_error("control tick", exc)
            return
        finally:
            self.diag.engine(self.runtime.stats())
        try:
            self._publish_step(obs, result, start)
        except Exception as exc:  # e.g. NaN actions: no chunk rather than a wrong one
            self.runtime.forget_chunk()  # the robot does not execute it: the next chunk must not continue it
            self._engine_error("action chunk", exc)
        self._publish_events(result.events)  # text of modes that finish it inside the frame

    def _publish_step(self, obs: Observation, result: Any, start: float) -> None:
        s, rt = self.settings, self.runtime
        latency_s = max(0.0, (self._now_ns() - obs.stamp_ns) / 1e9)  # observation → publication, node clock
        chunk = action_chunk_msg(
            result.actions,
            stamp=obs.stamp_ns,
            frame_seq=result.tick.frame_seq,
            step_period_s=s.step_period_s,
            joint_names=s.joint_names,
            prefill_latency_s=result.tick.prefill_s,
            action_latency_s=result.tick.action_s,
            engine_mode=rt.config.engine_mode,
            frame_id=obs.frame_id,
            latency_s=latency_s,
            n_action_steps=rt.n_action_steps,
        )  # raises ValueError for NaN/inf actions: no chunk rather than a wrong one
        trajectory = None
        if s.publish_trajectory and self._trajectory_pub is not None:
            try:
                timed, clamped = aligned_trajectory(result.actions, s.joint_names, s.step_period_s, self._limits,
                                                    obs.stamp_ns, latency_s, rt.n_action_steps, rt.config.time_alignment)
            except ChunkTooLate as exc:  # the controller would reject it: say so, send the chunk only
                self.store.count("chunk_too_late")
                self._warn("chunk_too_late", f"no trajectory this tick: {exc}")
                rt.forget_chunk()
            else:
                trajectory = to_trajectory_msg(timed)
                self.diag.clamped(clamped)
        self._chunk_pub.publish(chunk)
        if trajectory is not None:
            self._trajectory_pub.publish(trajectory)  # type: ignore[union-attr]
        self._last_latency_s = latency_s
        self.diag.chunk_published(self._now_ns(), time.perf_counter() - start)

    def _on_decode(self) -> None:
        fixed = self.runtime.config.tokens_per_frame > 0  # k tokens per frame: one decode call per tick
        left_ns = self._control_timer.time_until_next_call()
        period_s = self.settings.control_period_s
        margin_s = max(0.002, 0.1 * period_s)  # one decode step may overrun its prediction
        slack_s = min((left_ns if left_ns is not None else 0) / 1e9, period_s) - margin_s
        if slack_s <= 0 and not fixed:
            # Ticks overrun their period: text still gets a tenth of a period per tick rather than starving.
            slack_s = MIN_DECODE_SHARE * period_s
        try:
            events = self.runtime.decode(deadline=time.monotonic() + max(0.0, slack_s))
            self._publish_events(events)
        except Exception as exc:
            self._engine_error("text decode", exc)
        finally:
            self.diag.engine(self.runtime.stats())

    def _publish_events(self, events: Sequence[Any]) -> None:
        """Publish TextDelta per event and, on a request's final event, its whole text as String."""
        if not events:
            return
        now = self._now_ns()
        tokens = 0
        for ev in events:
            tokens += len(ev.token_ids)
            parts = self._text_parts.setdefault(ev.request_id, [])
            parts.append(ev.text)
            full = "".join(self._text_parts.pop(ev.request_id)) if ev.final else None
            pubs = self._text_pubs.get(ev.task)
            if pubs is None or not self.settings.publish_text:
                continue
            pubs.delta.publish(
                text_delta_msg(
                    request_id=ev.request_id, task=ev.task, seq=ev.seq, text=ev.text, token_ids=ev.token_ids,
                    final=ev.final, finish_reason=ev.finish_reason, stamp=now,
                    source_stamp=ev.frame_stamp_ns, source_frame_seq=ev.frame_seq,
                )
            )
            if full is not None:
                pubs.final.publish(String(data=full))
        self.diag.tokens(now, tokens)

    def _skip(self, kind: str, message: str) -> None:
        self.diag.tick_skipped(f"{kind}: {message}")
        self._warn(kind, f"no action chunk this tick: {message}")

    def _engine_error(self, where: str, exc: BaseException) -> None:
        message = f"{where} failed: {type(exc).__name__}: {exc}"
        self.diag.engine_error(message)
        self._warn("engine_error", message)

    def _on_diagnostics(self) -> None:
        now = self.get_clock().now()
        statuses = self.diag.report(now.nanoseconds, self.store.counters(), hardware_id=self.runtime.config.device)
        self._diag_pub.publish(diagnostic_array(now.to_msg(), statuses))

    # ------------------------------------------------------------------------------ parameters
    def _on_set_parameters(self, changes: list[Parameter]) -> SetParametersResult:
        return P.check_changes(self._values, changes)

    def _after_set_parameters(self, changes: list[Parameter]) -> None:
        self._values = P.read_values(self)  # post-set: the new values are stored already
        old, new = self.settings, P.node_settings(self._values)
        self.settings = new
        self.store.max_instruction_chars = new.max_instruction_chars
        self._limits = JointLimits(new.joint_limits_lower, new.joint_limits_upper)
        if new.control_rate_hz != old.control_rate_hz:
            self._control_timer.timer_period_ns = int(round(new.control_period_s * 1e9))
        self.diag.set_target_rate(self._chunk_rate_hz())  # the control rate or the step period may have changed
        for p in changes:
            self.get_logger().info(f"parameter {p.name} set to {p.value!r}")

    # ------------------------------------------------------------------------------- shutdown
    def finish(self, timeout_s: float = 1.0) -> int:
        """Cancel live text requests and publish their final deltas (call after the executor stopped).

        Waits up to `timeout_s` in all for subscribers to acknowledge the text (the data itself is sent at
        once; an acknowledgement may wait for the writer's next heartbeat). Returns how many requests ended.
        """
        for timer in (self._control_timer, self._diag_timer):
            timer.cancel()
        self._stopping.set()
        self._tick_wanted.set()
        self._model_thread.join(timeout=30.0)  # the runtime is never used from two threads
        try:
            events = self.runtime.close()
        except Exception as exc:
            self.get_logger().error(f"closing the runtime failed: {type(exc).__name__}: {exc}")
            return 0
        self._publish_events(events)
        deadline = time.monotonic() + timeout_s
        for pubs in self._text_pubs.values():
            for pub in (pubs.delta, pubs.final):
                pub.wait_for_all_acked(Duration(seconds=max(0.0, deadline - time.monotonic())))
        return sum(1 for ev in events if ev.final)
