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

Phases (the managed node in `lifecycle.py` drives them from its transitions; the plain node runs the first
two in its constructor): configure = validate the parameters, load model, tokenizer and statistics, warm
up, create the publishers and the `~/ask` action server; activate = subscriptions, the control timer and
the model thread live; deactivate = stop ticking and finish live text (final deltas published, KV freed);
cleanup = release everything. Parameters and the diagnostics timer exist from construction on.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from oxygen_ros_msgs.msg import ActionChunk, TextDelta
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher
from rclpy.event_handler import QoSRequestedIncompatibleQoSInfo, SubscriptionEventCallbacks
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_policy_name_from_kind, qos_profile_sensor_data
from rcl_interfaces.msg import SetParametersResult
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String

from oxygen_ros.interface import settings as S
from oxygen_ros.interface.convert import action_chunk_msg, compressed_image_to_array, image_to_array, joint_positions, stamp_to_ns, text_delta_msg
from oxygen_ros.interface.inputs import InputStore, Observation, ObservationError
from oxygen_ros.interface.outputs import JointLimits, final_text_topic, text_topic
from oxygen_ros.runtime import InputError, PolicyRuntime, RuntimeConfig
from oxygen_ros.runtime.alignment import ChunkTooLate, replan_due

from . import node_params
from .ask_server import AskServer
from .controller_outputs import ControllerOutputs
from .diagnostics import Diagnostics, diagnostic_array
from .topic_stats import TopicStatistics

__all__ = ["OxygenNode", "RuntimeLoader"]

RuntimeLoader = Callable[[RuntimeConfig], Any]  # PolicyRuntime.load or a test double

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
TEXT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)  # deltas must not be lost
# The instruction is read by two subscriptions: a latched (transient local) one gets the last instruction of a
# latched publisher that published before the node started; a volatile one also takes plain publishers such as
# `ros2 topic pub` (a transient local reader refuses a volatile writer as incompatible).
INSTRUCTION_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
INSTRUCTION_LIVE_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
# Until the first chunk, or this long after activation, inputs that have not arrived yet (the robot or the
# simulator is still starting) are expected: one info line, no warnings.
STARTUP_GRACE_S = 30.0
STARTUP_KINDS = ("missing_image", "missing_joint_state", "missing_instruction")
WARN_THROTTLE_S = 2.0
MIN_DECODE_SHARE = 0.1  # decode budget per tick, as a share of the period, when ticks leave no slack
_DIGITS = re.compile(r"[0-9.]+")
_MAX_THROTTLE_KEYS = 256


@dataclass
class _TextPublishers:
    delta: Publisher
    final: Publisher


def _wait_acked(publishers: Sequence[Publisher], timeout_s: float, step_s: float = 0.01) -> bool:
    """Wait up to `timeout_s` in all until every subscriber acknowledged what `publishers` sent.

    In short slices: rclpy's wait holds the GIL for its whole timeout, which would keep the main thread from
    handling a repeated Ctrl-C (main.py times signals as they are handled)."""
    deadline = time.monotonic() + timeout_s
    for pub in publishers:
        while not pub.wait_for_all_acked(Duration(seconds=step_s)):
            if time.monotonic() >= deadline:
                return False
    return True


class OxygenNode(Node):
    """The policy node. Raises `params.ConfigError` for bad parameters and whatever `runtime_loader`
    raises (`RuntimeLoadError`) when the model cannot be loaded.

    `managed=True` (the lifecycle node) only declares the parameters and starts the diagnostics; the
    transitions call `_configure`, `_activate`, `_deactivate` and `_cleanup`."""

    def __init__(self, node_name: str = "oxygen_node", *, runtime_loader: RuntimeLoader | None = None,
                 managed: bool = False, **kwargs: Any) -> None:
        Node.__init__(self, node_name, **kwargs)
        self._managed = managed
        self._runtime_loader: RuntimeLoader = runtime_loader or PolicyRuntime.load
        self._values = node_params.declare_parameters(self, fixed_read_only=not managed)
        self._warn_unknown_overrides()
        self.runtime: Any = None  # set while configured
        self._ready = False  # configured: runtime, store, statistics and publishers all exist
        self.active = False
        self.state_problem = ""  # why the latest configure failed ('' = it did not)
        self._loggers: dict[tuple[str, str], Any] = {}
        self._text_parts: dict[int, list[str]] = {}
        self._last_instruction = ""
        self._grace_until = 0.0  # time.monotonic() until which not-yet-arrived inputs are not warned about
        self._tick_wanted = threading.Event()
        self._last_chunk_s: float | None = None  # node-clock time of the tick of the last chunk
        self._last_latency_s = 0.0  # observation → publication of the last chunk
        self._stopping = threading.Event()
        self._model_thread: threading.Thread | None = None
        self._input_subs: list[Any] = []
        self._control_timer: Any = None
        self._outputs: ControllerOutputs | None = None  # controller publishers, while configured

        self._timer_group = MutuallyExclusiveCallbackGroup()
        self._input_group = ReentrantCallbackGroup()
        self._diag_group = MutuallyExclusiveCallbackGroup()
        self._ask_group = ReentrantCallbackGroup()
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._after_set_parameters)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", RELIABLE)
        self._ask = AskServer(self, callback_group=self._ask_group)  # refuses questions until active
        self._diag_timer = self.create_timer(float(self._values["diagnostics_period_s"]), self._on_diagnostics,
                                             callback_group=self._diag_group)
        if not managed:
            self._configure()
            self._activate()

    # ---------------------------------------------------------------------------------- phases
    def _configure(self) -> None:
        """Validate the parameters, load the model (+ tokenizer, statistics, warm-up), create the publishers and
        the ~/ask server. Raises ConfigError / RuntimeLoadError and then holds nothing."""
        self._values = node_params.read_values(self)
        self.settings, runtime_config = S.settings_from_values(self._values)
        self.runtime = self._runtime_loader(runtime_config)
        try:
            self._check_fits_model()
            s = self.settings
            unused = self.runtime.num_image_slots - len(s.camera_topics)  # slots past the list: no camera, masked
            cameras = [self.resolve_topic_name(t) if t else "" for t in s.camera_topics]  # as `ros2 topic list` shows
            self.store = InputStore(
                [*cameras, *[""] * unused],
                [*s.camera_optional, *[True] * unused],
                [*s.camera_sizes, *[(0, 0)] * unused],
                use_state=bool(s.joint_names),
                max_instruction_chars=s.max_instruction_chars,
            )
            self.diag = Diagnostics(self._chunk_rate_hz())
            self._diag_timer.timer_period_ns = int(round(s.diagnostics_period_s * 1e9))  # may have changed unconfigured
            self.topic_stats = TopicStatistics([*(t for t in cameras if t), *(["joint_states"] if s.joint_names else [])])
            self._limits = JointLimits(s.joint_limits_lower, s.joint_limits_upper)
            self._create_publishers()
            self._ask.attach(self.runtime, max_tokens=s.ask_max_tokens, max_goals=s.ask_max_goals)
        except BaseException:
            self.runtime = None
            raise
        self.state_problem = ""
        self._ready = True
        self._log_start()

    def _activate(self) -> None:
        """Subscriptions, the control timer and the model thread live; ~/ask takes questions."""
        self._stopping.clear()
        self._tick_wanted.clear()
        self._last_chunk_s = None  # the first tick after activation computes a chunk
        self._grace_until = time.monotonic() + STARTUP_GRACE_S
        self._create_subscriptions()
        self._create_timers()
        self._model_thread = threading.Thread(target=self._model_loop, name="oxygen-model", daemon=True)
        self._model_thread.start()
        self._ask.set_active(True)
        self.active = True

    def _deactivate(self, timeout_s: float = 1.0) -> int:
        """Stop ticking, cancel live text requests and questions and publish their final deltas (their KV is
        freed), then drop the subscriptions. Returns how many requests ended."""
        if not self.active:
            return 0
        self.active = False
        self._ask.set_active(False)
        self._stopping.set()
        self._tick_wanted.set()
        if self._model_thread is not None:
            self._model_thread.join(timeout=30.0)  # the runtime is never used from two threads
        if self._control_timer is not None:  # cancelled, not destroyed: `activate` resets it
            self._control_timer.cancel()
        if self._outputs is not None:
            self._outputs.stop()  # velocity and twist outputs: a zero command rather than the last one
        ended = 0
        try:
            events = self.runtime.close()
        except Exception as exc:
            self.get_logger().error(f"closing the runtime failed: {type(exc).__name__}: {exc}")
        else:
            self._publish_events(events)
            ended = sum(1 for ev in events if ev.final)
            self.diag.engine(self.runtime.stats())  # /diagnostics shows the KV freed while inactive
            _wait_acked([p for pubs in self._text_pubs.values() for p in (pubs.delta, pubs.final)], timeout_s)
        self._ask.close("the node stopped answering (deactivated)")
        for sub in self._input_subs:
            self.destroy_subscription(sub)
        self._input_subs = []
        return ended

    def _cleanup(self) -> None:
        """Release the model, the publishers and the ~/ask server (back to unconfigured)."""
        self._deactivate()
        self._ready = False
        self._ask.detach()
        if self._outputs is not None:
            self._outputs.destroy(self._destroy_publisher)
            self._outputs = None
        for pub in [self._chunk_pub, *(p for t in self._text_pubs.values() for p in (t.delta, t.final))]:
            if pub is not None:
                self._destroy_publisher(pub)
        self._text_pubs = {}
        self._text_parts.clear()
        self.runtime = None

    def _make_publisher(self, msg_type: Any, topic: str, qos: QoSProfile) -> Publisher:
        """A publisher of a configured node (the managed node makes lifecycle publishers)."""
        return self.create_publisher(msg_type, topic, qos)

    def _destroy_publisher(self, publisher: Publisher) -> None:
        self.destroy_publisher(publisher)

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
        problems = S.model_fit_problems(self.settings, rt.num_image_slots, rt.action_dim, rt.state_dim, rt.needs_state)
        if problems:
            raise S.ConfigError("parameters do not fit the model: " + "; ".join(problems))

    def _create_publishers(self) -> None:
        self._chunk_pub = self._make_publisher(ActionChunk, "~/action_chunk", RELIABLE)
        self._outputs = ControllerOutputs(self, self.settings, self._make_publisher, RELIABLE, self._timer_group)
        self._text_pubs = {
            task.name: _TextPublishers(
                self._make_publisher(TextDelta, text_topic(task.name), TEXT_QOS),
                self._make_publisher(String, final_text_topic(task.name), RELIABLE),
            )
            for task in self.runtime.config.tasks
        }

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
        quiet = SubscriptionEventCallbacks(incompatible_qos=lambda event: None)  # the volatile one reads that writer
        warn = SubscriptionEventCallbacks(incompatible_qos=self._on_incompatible_instruction)
        for qos, events in ((INSTRUCTION_QOS, quiet), (INSTRUCTION_LIVE_QOS, warn)):
            self._input_subs.append(
                self.create_subscription(String, s.instruction_topic, self._on_instruction, qos,
                                         callback_group=self._input_group, event_callbacks=events)
            )

    def _create_timers(self) -> None:
        s = self.settings
        # The control timer only wakes the model thread (node clock: follows /clock with use_sim_time). It lives
        # as long as the node: destroying a timer while the executor waits on it can make the executor raise.
        if self._control_timer is None:
            self._control_timer = self.create_timer(s.control_period_s, self._tick_wanted.set, callback_group=self._timer_group)
        else:
            self._control_timer.timer_period_ns = int(round(s.control_period_s * 1e9))
            self._control_timer.reset()

    def _model_loop(self) -> None:
        """The model thread: each control tick, the tick and then text decoding in the slack before the next.
        Questions from ~/ask (and their cancellations) are taken in here, the runtime's only thread."""
        while not self._stopping.is_set():
            woken = self._tick_wanted.wait(timeout=0.1)
            self._ask.pump()
            if not woken:
                continue
            self._tick_wanted.clear()
            if self._stopping.is_set():
                break
            self._on_tick()
            if self.runtime.config.engine_mode == "oxygen":
                self._on_decode()

    def _log_start(self) -> None:
        s, rt = self.settings, self.runtime
        names = rt.image_slot_names  # every slot of the model, with the checkpoint's name and its topic
        topics = [*s.camera_topics, *[""] * (len(names) - len(s.camera_topics))]
        cameras = ", ".join(f"{i}:{names[i] if i < len(names) else i} <- {t or '(masked)'}"
                            f"{' [compressed]' if t and s.camera_compressed[i] else ''}" for i, t in enumerate(topics))
        tasks = ", ".join(f"{t.name}/every {t.every_n_frames}" for t in rt.config.tasks) or "none"
        model = rt.config.checkpoint or f"preset {rt.config.model_preset}"
        self.get_logger().info(
            f"ready: model {model} ({rt.config.engine_mode}, {rt.config.device}, {rt.config.dtype}); cameras {cameras}; "
            f"{len(s.joint_names)} joints; {s.control_rate_hz:g} Hz; text tasks {tasks}"
        )
        self.get_logger().info(rt.describe())
        for o in s.outputs:
            self.get_logger().info(
                f"output {o.name}: {o.type} on {o.topic} <- action dims {list(o.dims)}"
                f"{' (' + o.interface + ')' if o.type != 'twist' else ' in ' + o.frame + f' x {o.scale:g}'}"
                f"{f' joints {list(o.joints)}' if o.joints else ''}"
                f"{f' binarized at {o.binarize.threshold:g} to {o.binarize.below:g}/{o.binarize.above:g}' if o.binarize else ''}"
            )
        if s.publish_trajectory and not s.outputs:
            self.get_logger().warning("publish_trajectory is true but there are no outputs (joint_names and output_types "
                                      "are empty): only the ActionChunk is published")

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

    def _on_instruction(self, msg: String, info: Any) -> None:
        reason = self.store.put_instruction(msg.data, self._now_ns(), sent_ns=int(info.get("source_timestamp", 0)))
        current = self.store.instruction()
        if reason:
            self._warn("bad_instruction", f"instruction refused: {reason}")
        elif current is not None and current != self._last_instruction:
            self._last_instruction = current
            self.get_logger().info(f"instruction: {current[:200]!r}")

    def _on_incompatible_instruction(self, event: QoSRequestedIncompatibleQoSInfo) -> None:
        topic = self.resolve_topic_name(self.settings.instruction_topic)
        self._warn("instruction_qos", f"a publisher on {topic} offers incompatible QoS "
                                      f"({qos_policy_name_from_kind(event.last_policy_kind)}): its instructions are not "
                                      "received; publish them reliable (volatile or transient local)")

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
        now_ns = self._now_ns()
        self.diag.tick_started(now_ns)
        self.topic_stats.record_ages(self.store.ages_s(now_ns))
        try:
            obs = self.store.snapshot(now_ns, int(s.max_observation_age_s * 1e9), s.default_instruction)
        except ObservationError as exc:
            self._skip(exc.kind, str(exc))
            return
        try:
            frame = self.runtime.make_frame(obs.images, obs.state, obs.instruction, obs.stamp_ns)
        except InputError as exc:
            self.store.count(f"skipped_invalid_{exc.kind}")
            self._skip(f"invalid_{exc.kind}", str(exc))
            return
        if self.runtime.last_prompt_truncated:  # cut as openpi/LeRobot do; the chunk still goes out
            self.store.count("prompts_truncated")
            self._warn("prompt_truncated", f"prompt cut to {self.runtime.model_config.max_prompt_tokens} tokens "
                                           f"(max_prompt_tokens); shorten the instruction")
        try:
            # With real-time chunking the new chunk continues the last one; its delay is the last measured latency.
            result = self.runtime.step(frame, s.step_period_s, self._last_latency_s)
            self._last_chunk_s = now_s
        except Exception as exc:  # a robot never sees a traceback: log, count, no chunk, keep running
            self._engine_error("control tick", exc)
            return
        finally:
            self.diag.engine(self.runtime.stats())
        self._ask.on_refused(getattr(result.tick, "refused", ()))
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
        self._chunk_pub.publish(chunk)
        if s.publish_trajectory and self._outputs is not None and s.outputs:
            try:
                clamped = self._outputs.publish_chunk(result.actions, obs.stamp_ns, latency_s, rt.n_action_steps,
                                                      rt.config.time_alignment)  # fmt: skip
            except ChunkTooLate as exc:  # the controller would reject it: say so, send the chunk only
                self.store.count("chunk_too_late")
                self._warn("chunk_too_late", f"no controller command this tick: {exc}")
                rt.forget_chunk()
            else:
                self.diag.clamped(clamped)
        self._last_latency_s = latency_s
        now_ns = self._now_ns()
        self.diag.chunk_published(now_ns, time.perf_counter() - start)
        if obs.stamp_ns > 0:
            self.topic_stats.record_chunk_latency((now_ns - obs.stamp_ns) / 1e9)

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
        self._ask.on_events(events)
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
        if kind in STARTUP_KINDS and self._last_chunk_s is None and time.monotonic() < self._grace_until:
            self.get_logger().info(f"waiting for the first inputs ({message})", once=True)
            return
        self._warn(kind, f"no action chunk this tick: {message}")

    def _engine_error(self, where: str, exc: BaseException) -> None:
        message = f"{where} failed: {type(exc).__name__}: {exc}"
        self.diag.engine_error(message)
        self._warn("engine_error", message)

    def _on_diagnostics(self) -> None:
        now = self.get_clock().now()
        statuses = []
        if self._ready:
            device = self.runtime.config.device
            statuses = self.diag.report(now.nanoseconds, self.store.counters(), hardware_id=device)
            statuses.append(self.topic_stats.status(device))
        statuses.append(self._state_status())
        self._diag_pub.publish(diagnostic_array(now.to_msg(), statuses))

    def _state_status(self) -> DiagnosticStatus:
        """The node's state: active, inactive, or unconfigured (with why the latest configure failed)."""
        device = self.runtime.config.device if self._ready else ""
        status = DiagnosticStatus(name="oxygen_ros: node", level=DiagnosticStatus.OK, hardware_id=device)
        if self.active:
            status.message = "active"
        elif self._ready:
            status.level, status.message = DiagnosticStatus.WARN, "inactive: configured, not ticking"
        elif self.state_problem:
            status.level, status.message = DiagnosticStatus.ERROR, f"unconfigured: {self.state_problem}"
        else:
            status.level, status.message = DiagnosticStatus.WARN, "unconfigured"
        return status

    # ------------------------------------------------------------------------------ parameters
    def _on_set_parameters(self, changes: list[Parameter]) -> SetParametersResult:
        return node_params.check_changes(self._values, changes, fixed_locked=self._managed and self.runtime is not None)

    def _after_set_parameters(self, changes: list[Parameter]) -> None:
        self._values = node_params.read_values(self)  # post-set: the new values are stored already
        for p in changes:
            self.get_logger().info(f"parameter {p.name} set to {p.value!r}")
        if not self._ready:  # unconfigured (managed node): configure reads them
            return
        old, new = self.settings, S.node_settings(self._values)
        self.settings = new
        self.store.max_instruction_chars = new.max_instruction_chars
        self._limits = JointLimits(new.joint_limits_lower, new.joint_limits_upper)
        if self._outputs is not None:
            self._outputs.settings = new  # limits may have changed; the outputs themselves are fixed
        if new.control_rate_hz != old.control_rate_hz:
            if self.active:
                self._control_timer.timer_period_ns = int(round(new.control_period_s * 1e9))
        self.diag.set_target_rate(self._chunk_rate_hz())  # the control rate or the step period may have changed

    # ------------------------------------------------------------------------------- shutdown
    def destroy_node(self) -> None:
        self._ask.destroy()
        super().destroy_node()

    def finish(self, timeout_s: float = 1.0) -> int:
        """Stop the node for good: cancel live text requests and questions and publish their final deltas
        (main.py calls it while the executor still spins, so they and the ~/ask results go out).

        Waits up to `timeout_s` in all for subscribers to acknowledge the text (the data itself is sent at
        once; an acknowledgement may wait for the writer's next heartbeat). Returns how many requests ended.
        """
        self._diag_timer.cancel()
        return self._deactivate(timeout_s)
