"""`OxygenNode`: the rclpy node around `PolicyRuntime`.

Threading: subscription callbacks (a reentrant group) only convert and store the latest inputs. The model
work runs in ONE dedicated thread, so the runtime is never entered twice: the control timer only wakes it,
and it then runs the tick (observation → `runtime.step` → ActionChunk / JointTrajectory) followed by the
batched decoder (`runtime.decode` until shortly before the next tick). Model work is deliberately not an
executor callback: rclpy's MultiThreadedExecutor busy-spins while a timer is ready but its callback group
is busy, holding the GIL. (`main` also shortens the GIL switch interval; see there.)
Diagnostics run in their own group from numbers the model thread records.

Several robots (the `robots` parameter): one model, one engine and one model thread serve them all. Each
robot has its own `RobotPorts` (inputs, publishers, `~/ask`, diagnostics) under its namespace; a control tick
gathers the frames of every robot that is due and has usable inputs and runs them in one batched engine tick
(`PolicyRuntime.step_many`); a robot without usable inputs is skipped without delaying the others, and every
robot's text advances in the same decode steps. Each robot may have its own control rate
(`robot_control_rates_hz`): the timer then fires at the fastest, and `RobotClocks` says who is due.

Every time is the node clock's (`use_sim_time` and bag replay work). When that clock jumps (a looped bag's
`/clock` goes back, a simulator skips ahead: `ClockJumpWatch`), everything timed on the old timeline is dropped
or restarted — the inputs received before, the last chunk's tick (replan), the measured latency (time
alignment), the real-time-chunking guide, the diagnostics' windows, the streamed outputs' chunk, the robots'
tick schedule — and one info line says so; a chunk computed across the jump is not published. Bad inputs give a throttled warning,
a counter in /diagnostics and no chunk for that tick; the node keeps running. All model and KV logic lives
behind the runtime facade.

Phases (the managed node in `lifecycle.py` drives them from its transitions; the plain node runs the first
two in its constructor): configure = validate the parameters, load model, tokenizer and statistics, warm
up, create the publishers and the `~/ask` action server; activate = subscriptions, the control timer and
the model thread live; deactivate = stop ticking and finish live text (final deltas published, KV freed);
cleanup = release everything. Parameters and the diagnostics timer exist from construction on.

Why one file of this size: the node's own sequence (parameters → robot ports → the model thread's tick
and decode → holds) reads best in one place; the parts that stand alone live beside it (node_inputs, node_jumps,
node_report, controller_outputs, safety_port, episode_starts).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

from diagnostic_msgs.msg import DiagnosticArray
from oxygen_ros_msgs.msg import ActionChunk, TextDelta
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher
from rclpy.exceptions import InvalidHandle
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rcl_interfaces.msg import SetParametersResult
from std_msgs.msg import String

from oxygen_ros.interface import settings as S
from oxygen_ros.interface.convert import action_chunk_msg
from oxygen_ros.interface.inputs import AFTER_CLOCK_JUMP, InputStore, Observation, ObservationError
from oxygen_ros.interface.outputs import JointLimits, final_text_topic, text_topic
from oxygen_ros.runtime import InputError, PolicyRuntime, RuntimeConfig
from oxygen_ros.runtime.alignment import ChunkTooLate, replan_due
from oxygen_ros.runtime.clock_jumps import ClockJump

from . import node_params
from .ask_server import AskServer
from oxygen_ros.interface.topic_names import robot_topic

from .controller_outputs import ControllerOutputs, UnsafeChunk
from .diagnostics import Diagnostics
from .robot_clocks import RobotClocks
from .robot_log import RobotLog
from .node_inputs import InputCallbacks
from .node_jumps import ClockJumps
from .node_report import NodeReport
from .reset_pose_offer import offer_reset_pose
from .robot_ports import RobotPorts, TextPublishers, diagnostics_prefix
from .safety_port import SafetyPort
from .time_jumps import ClockJumpWatch
from .topic_stats import TopicStatistics

__all__ = ["OxygenNode", "RuntimeLoader"]

RuntimeLoader = Callable[[RuntimeConfig], Any]  # PolicyRuntime.load or a test double

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
TEXT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)  # deltas must not be lost
# Until the first chunk, or this long after activation, inputs that have not arrived yet (the robot or the
# simulator is still starting) are expected: one info line, no warnings.
STARTUP_GRACE_S = 30.0
STARTUP_KINDS = ("missing_image", "missing_joint_state", "missing_instruction")
# Inputs that arrived and then stopped (a robot switched off, a simulator that finished): one line, not one a tick.
LOST_KINDS = ("stale_image", "stale_joint_state", "no_camera")
MIN_DECODE_SHARE = 0.1  # decode budget per tick, as a share of the period, when ticks leave no slack


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


class OxygenNode(InputCallbacks, ClockJumps, NodeReport, Node):
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
        self._text_parts: dict[int, list[str]] = {}
        self._ports: list[RobotPorts] = []  # one per robot served, while configured
        self._grace_until = 0.0  # time.monotonic() until which not-yet-arrived inputs are not warned about
        self._activated_at = 0.0  # time.monotonic() of the latest activation
        self._awaiting_first_chunk: set[str] = set()  # robots with no chunk since it (the time is logged once)
        self._tick_wanted = threading.Event()
        self._stopping = threading.Event()
        self._model_thread: threading.Thread | None = None
        self._control_timer: Any = None
        self._clocks: RobotClocks | None = None  # several robots: who each control tick serves
        self._jump_lock = threading.Lock()
        self._timeline = 0  # clock jumps so far: a tick that saw another value computed across a jump
        self._pending_jumps: list[ClockJump] = []  # reported, not yet restarted by the model thread
        self._jumped_at_ns: int | None = None  # node-clock time of the latest jump the model thread restarted from

        self._timer_group = MutuallyExclusiveCallbackGroup()
        self._input_group = ReentrantCallbackGroup()
        self._diag_group = MutuallyExclusiveCallbackGroup()
        self._ask_group = ReentrantCallbackGroup()
        self._safety_group = MutuallyExclusiveCallbackGroup()  # the stop input and the hold watchdog
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._after_set_parameters)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", RELIABLE)
        # ~/ask servers by action name, one per robot served (`robots` is fixed for the node's life); they live as
        # long as the node and refuse questions until active.
        self._asks: dict[str, AskServer] = {
            name: AskServer(self, callback_group=self._ask_group, name=name) for name in self._ask_names()
        }
        self._diag_timer = self.create_timer(float(self._values["diagnostics_period_s"]), self._on_diagnostics,
                                             callback_group=self._diag_group)
        self._jump_watch = ClockJumpWatch(self.get_clock(), self._on_clock_jump)
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
            names = s.robots or ("",)
            for name in names[1:]:  # the first robot is the engine's own ("")
                self.runtime.add_robot(name)
            self._diag_timer.timer_period_ns = int(round(s.diagnostics_period_s * 1e9))  # may have changed unconfigured
            self._limits = JointLimits(s.joint_limits_lower, s.joint_limits_upper)
            self._ports = [self._make_ports(name, "" if i == 0 else name) for i, name in enumerate(names)]
        except BaseException:
            self._release_ports()
            self.runtime = None
            raise
        self.state_problem = ""
        self._ready = True
        self._log_start()

    def _activate(self) -> None:
        """Subscriptions, the control timer and the model thread live; ~/ask takes questions."""
        self._stopping.clear()
        self._tick_wanted.clear()
        for port in self._ports:
            port.last_chunk_s = None  # the first tick after activation computes a chunk
            port.log.reset()
        with self._jump_lock:
            self._pending_jumps.clear()
        self._jumped_at_ns = None
        self._grace_until = time.monotonic() + STARTUP_GRACE_S
        self._activated_at = time.monotonic()
        self._awaiting_first_chunk = {port.name for port in self._ports}
        self._create_subscriptions()
        self._create_timers()
        self._model_thread = threading.Thread(target=self._model_loop, name="oxygen-model", daemon=True)
        self._model_thread.start()
        for port in self._ports:
            port.ask.set_active(True)
        self.active = True

    def _deactivate(self, timeout_s: float = 1.0) -> int:
        """Stop ticking, cancel live text requests and questions and publish their final deltas (their KV is
        freed), then drop the subscriptions. Returns how many requests ended."""
        if not self.active:
            return 0
        self.active = False
        for port in self._ports:
            port.ask.set_active(False)
        self._stopping.set()
        self._tick_wanted.set()
        if self._model_thread is not None:
            self._model_thread.join(timeout=30.0)  # the runtime is never used from two threads
        if self._control_timer is not None:  # cancelled, not destroyed: `activate` resets it
            self._control_timer.cancel()
        for port in self._ports:
            if port.safety is not None:
                port.safety.hold("deactivate", "the node was deactivated")
        ended = 0
        try:
            events = self.runtime.close()
        except Exception as exc:
            self.get_logger().error(f"closing the runtime failed: {type(exc).__name__}: {exc}")
        else:
            self._publish_events(events)
            ended = sum(1 for ev in events if ev.final)
            stats = self.runtime.stats()
            for port in self._ports:
                port.diag.engine(stats)  # /diagnostics shows the KV freed while inactive
            _wait_acked([p for port in self._ports for t in port.text_pubs.values() for p in (t.delta, t.final)], timeout_s)
        for port in self._ports:
            port.ask.close("the node stopped answering (deactivated)")
            for sub in port.subscriptions:
                self.destroy_subscription(sub)
            port.subscriptions = []
            if port.instruction is not None:
                port.instruction.close()
                port.instruction = None
        return ended

    def _cleanup(self) -> None:
        """Release the model, the publishers and the ~/ask server (back to unconfigured)."""
        self._deactivate()
        self._ready = False
        self._release_ports()
        self._text_parts.clear()
        self.runtime = None

    def _release_ports(self) -> None:
        for port in self._ports:
            port.ask.detach()
            if port.safety is not None:
                port.safety.destroy()
                port.safety = None
            if port.outputs is not None:
                port.outputs.destroy(self._destroy_publisher)
                port.outputs = None
            for pub in port.publishers():
                self._destroy_publisher(pub)
            if port.reset_pose_pub is not None:
                self.destroy_publisher(port.reset_pose_pub)
                port.reset_pose_pub = None
            port.chunk_pub, port.text_pubs = None, {}
        self._ports = []

    def _make_publisher(self, msg_type: Any, topic: str, qos: QoSProfile) -> Publisher:
        """A publisher of a configured node (the managed node makes lifecycle publishers)."""
        return self.create_publisher(msg_type, topic, qos)

    def _destroy_publisher(self, publisher: Publisher) -> None:
        self.destroy_publisher(publisher)

    @property
    def store(self) -> InputStore:
        """The first robot's inputs (the only robot's, without `robots`)."""
        return self._ports[0].store

    @property
    def diag(self) -> Diagnostics:
        """The first robot's diagnostics."""
        return self._ports[0].diag

    # --------------------------------------------------------------------------------- set-up
    def _warn_unknown_overrides(self) -> None:
        # rclpy silently ignores overrides of undeclared parameters; a typo in a params file would go unnoticed.
        overrides = getattr(self, "_parameter_overrides", {}) or {}
        unknown = sorted(n for n in overrides if not self.has_parameter(n) and not n.startswith("qos_overrides."))
        if unknown:
            self.get_logger().warning(f"ignoring unknown parameters {unknown} (misspelled? see config/demo.yaml)")

    def _ask_names(self) -> list[str]:
        """The ~/ask action of each robot the parameters name: `~/ask` for the only robot, `<robot>/<node>/ask`
        for each of several. None while the names are invalid (configure then fails and says why)."""
        robots = self._values["robots"]
        if node_params.SPECS["robots"].validate(robots):
            return []
        return [robot_topic(r, "~/ask", self.get_name()) for r in robots or [""]]

    def _chunk_rate_hz(self, robot: str) -> float:
        """The chunk rate diagnostics expect of a robot: its control rate, or one chunk per n_action_steps steps."""
        s, rt = self.settings.for_robot(robot), self.runtime
        if rt.config.replan == "tick":
            return s.control_rate_hz
        return min(s.control_rate_hz, 1.0 / (rt.n_action_steps * s.step_period_s))

    def _check_fits_model(self) -> None:
        rt = self.runtime
        problems = S.model_fit_problems(self.settings, rt.num_image_slots, rt.action_dim, rt.state_dim, rt.needs_state)
        if problems:
            raise S.ConfigError("parameters do not fit the model: " + "; ".join(problems))

    def _make_ports(self, name: str, key: str) -> RobotPorts:
        """One robot's input store, diagnostics, publishers and ~/ask server (topics under its namespace)."""
        s, rt = self.settings, self.runtime
        node_name = self.get_name()
        ask_name = robot_topic(name, "~/ask", node_name)
        unused = rt.num_image_slots - len(s.camera_topics)  # slots past the list: no camera, masked
        # as `ros2 topic list` shows them
        cameras = [self.resolve_topic_name(robot_topic(name, t, node_name)) if t else "" for t in s.camera_topics]
        store = InputStore(
            [*cameras, *[""] * unused],
            [*s.camera_optional, *[True] * unused],
            [*s.camera_sizes, *[(0, 0)] * unused],
            use_state=bool(s.joint_names),
            max_instruction_chars=s.max_instruction_chars,
            state_parts=[(self.resolve_topic_name(robot_topic(name, j.topic, node_name)), j.indices) for j in s.joint_sources],
        )
        prefix = diagnostics_prefix(name)
        topic_stats = TopicStatistics([*(t for t in cameras if t), *(store.state_names if s.joint_names else [])], prefix=prefix)
        port = RobotPorts(name, key, node_name, store, Diagnostics(self._chunk_rate_hz(name), prefix=prefix), topic_stats,
                          self._asks[ask_name], RobotLog(self.get_logger(), name))  # fmt: skip
        port.chunk_pub = self._make_publisher(ActionChunk, port.topic("~/action_chunk"), RELIABLE)
        port.outputs = ControllerOutputs(self, s.for_robot(name),
                                         lambda typ, topic, qos: self._make_publisher(typ, port.topic(topic), qos),
                                         RELIABLE, self._timer_group)  # fmt: skip
        port.safety = SafetyPort(self, port.outputs, store, port.log, s.for_robot(name), rt.n_action_steps, port.topic,
                                 lambda: self.active, self._safety_group, prefix, lambda: self._jump_watch.epoch)  # fmt: skip
        port.text_pubs = {
            task.name: TextPublishers(
                self._make_publisher(TextDelta, port.topic(text_topic(task.name)), TEXT_QOS),
                self._make_publisher(String, port.topic(final_text_topic(task.name)), RELIABLE),
            )
            for task in rt.config.tasks
        }
        port.ask.attach(rt, max_tokens=s.ask_max_tokens, max_goals=s.ask_max_goals, robot=key)
        port.reset_pose_pub = offer_reset_pose(self, port.topic("~/reset_pose"), self._values, s.outputs)
        return port

    def _create_timers(self) -> None:
        s = self.settings
        self._clocks = self._robot_clocks()
        # The control timer only wakes the model thread (node clock: follows /clock with use_sim_time). It lives
        # as long as the node: destroying a timer while the executor waits on it can make the executor raise.
        if self._control_timer is None:
            self._control_timer = self.create_timer(s.tick_period_s, self._tick_wanted.set, callback_group=self._timer_group)
        else:
            self._control_timer.timer_period_ns = int(round(s.tick_period_s * 1e9))
            self._control_timer.reset()

    def _robot_clocks(self) -> RobotClocks | None:
        """Several robots: each on its own clock at its own rate. One robot: every timer tick is its tick."""
        s = self.settings
        return RobotClocks({r: s.for_robot(r).control_period_s for r in s.robots}) if s.robots else None

    def _model_loop(self) -> None:
        """The model thread: each control tick, the tick and then text decoding in the slack before the next.
        Questions from ~/ask (and their cancellations) are taken in here, the runtime's only thread."""
        while not self._stopping.is_set():
            woken = self._tick_wanted.wait(timeout=0.1)
            for port in self._ports:
                port.ask.pump()
            if not woken:
                self._unstick_control_timer()
                continue
            self._tick_wanted.clear()
            if self._stopping.is_set():
                break
            self._on_tick()
            if self.runtime.config.engine_mode == "oxygen":
                self._on_decode()

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    # ------------------------------------------------------------------------------ model work
    def _on_tick(self) -> None:
        """One control tick: the frame of every robot that is due and has usable inputs, one engine tick for
        them all, then each robot's chunk and controller commands."""
        s, rt = self.settings, self.runtime
        self._jump_watch.check()  # system time stepped (under sim time rcl reports jumps itself)
        timeline = self._restart_after_jumps()
        now_s = self._now_ns() / 1e9
        clocks = self._clocks
        mine = None if clocks is None else set(clocks.due(now_s))  # several robots: those whose own tick came
        ticking = [p for p in self._ports if mine is None or p.name in mine]
        robot = {p.key: s.for_robot(p.name) for p in ticking}  # each robot's own control and step periods
        due = [p for p in ticking
               if replan_due(now_s, p.last_chunk_s, rt.config.replan, rt.n_action_steps, robot[p.key].step_period_s,
                             slack_s=robot[p.key].control_period_s / 2)]  # fmt: skip
        if not due:
            return  # the current chunks still run: replanning every n_action_steps steps
        start = time.perf_counter()
        epoch = self._jump_watch.epoch  # odd, or changed by the snapshot: the clock jumped while it was read
        now_ns = self._now_ns()
        frames: dict[str, Any] = {}
        observations: dict[str, Observation] = {}
        for port in due:
            seed = port.episodes.due(now_ns) if port.episodes is not None else None
            if seed is not None:
                self.start_episode(seed, port)
            got = self._frame_of(port, now_ns, epoch)
            if got is not None:
                observations[port.key], frames[port.key] = got
        if not frames:
            return
        served = [p for p in due if p.key in frames]
        try:
            # With real-time chunking each new chunk continues its robot's last one; the delay is the last
            # measured latency.
            if len(self._ports) == 1:
                port = served[0]
                results = {port.key: rt.step(frames[port.key], s.step_period_s, port.last_latency_s)}
            else:
                results = rt.step_many(frames, {p.key: robot[p.key].step_period_s for p in served},
                                       {p.key: p.last_latency_s for p in served})
        except Exception as exc:  # a robot never sees a traceback: log, count, no chunk, keep running
            for port in served:
                self._engine_error(port, "control tick", exc)
                self._hold(port, "model_error", f"the control tick failed: {type(exc).__name__}: {exc}", answer=True)
            return
        finally:
            self._record_engine(served)
        if self._timeline != timeline:  # the clock jumped during the tick: the chunks belong to the other timeline
            for port in served:
                rt.forget_chunk(port.key)
            return
        for port in served:
            result = results[port.key]
            port.last_chunk_s = now_s
            port.ask.on_refused(getattr(result.tick, "refused", ()))
            try:
                self._publish_step(port, observations[port.key], result, start)
            except Exception as exc:  # e.g. NaN actions: no chunk rather than a wrong one
                if not isinstance(exc, UnsafeChunk) and port.outputs is not None:
                    port.outputs.count_refusal(result.actions)  # refused before the outputs saw it (NaN)
                # first: within the period; sent even while holding already (the tick's answer: a lockstep
                # simulator steps on)
                self._hold(port, "bad_output", f"no command from this chunk: {exc}", answer=True)
                rt.forget_chunk(port.key)  # the robot does not execute it: the next chunk must not continue it
                self._engine_error(port, "action chunk", exc)
            self._publish_events(result.events)  # text of modes that finish it inside the frame

    def _frame_of(self, port: RobotPorts, now_ns: int, epoch: int) -> tuple[Observation, Any] | None:
        """The robot's observation and model frame now, or None (skipped: the reason is counted and logged).
        ``epoch``: the clock-jump epoch taken before ``now_ns`` was read."""
        s = self.settings
        port.diag.tick_started(now_ns)
        port.topic_stats.record_ages(port.store.ages_s(now_ns))
        try:
            obs = port.store.snapshot(now_ns, int(s.max_observation_age_s * 1e9), s.default_instruction)
        except ObservationError as exc:
            if epoch % 2 or self._jump_watch.epoch != epoch:
                # The time is of the new timeline, the inputs of the old one (rcl moved the clock before the
                # jump's restart ran): not a lost input. The next tick sees both of the same timeline.
                port.diag.tick_waiting(str(exc))
            else:
                self._skip(port, exc.kind, str(exc))
            return None
        try:
            frame = self.runtime.make_frame(obs.images, obs.state, obs.instruction, obs.stamp_ns)
        except InputError as exc:
            port.store.count(f"skipped_invalid_{exc.kind}")
            self._skip(port, f"invalid_{exc.kind}", str(exc))
            return None
        if self.runtime.last_prompt_truncated:  # cut as openpi/LeRobot do; the chunk still goes out
            port.store.count("prompts_truncated")
            port.log.warn("prompt_truncated", f"prompt cut to {self.runtime.model_config.max_prompt_tokens} "
                                           f"tokens (max_prompt_tokens); shorten the instruction")
        port.log.inputs_back()
        return obs, frame

    def _publish_step(self, port: RobotPorts, obs: Observation, result: Any, start: float) -> None:
        s, rt = self.settings.for_robot(port.name), self.runtime
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
        now_ns = self._now_ns()
        # Recorded before it leaves: a report never misses a chunk that a subscriber already has.
        port.diag.chunk_published(now_ns, time.perf_counter() - start, obs.stamp_ns)
        port.chunk_pub.publish(chunk)
        if s.publish_trajectory and port.outputs is not None and s.outputs:
            try:
                clamped = port.outputs.publish_chunk(result.actions, obs.stamp_ns, latency_s, rt.n_action_steps,
                                                      rt.config.time_alignment)  # fmt: skip
            except ChunkTooLate as exc:  # the controller would reject it: say so, send the chunk only
                port.store.count("chunk_too_late")
                port.log.warn("chunk_too_late", f"no controller command this tick: {exc}")
                rt.forget_chunk(port.key)
            else:
                port.diag.clamped(clamped)
        port.last_latency_s = latency_s
        if port.name in self._awaiting_first_chunk:
            self._log_first_chunk(port.name)
        if obs.stamp_ns > 0:
            port.topic_stats.record_chunk_latency((now_ns - obs.stamp_ns) / 1e9)

    def _on_decode(self) -> None:
        fixed = self.runtime.config.tokens_per_frame > 0  # k tokens per frame: one decode call per tick
        left_ns = self._control_timer.time_until_next_call()
        period_s = self.settings.tick_period_s
        margin_s = max(0.002, 0.1 * period_s)  # one decode step may overrun its prediction
        slack_s = min((left_ns if left_ns is not None else 0) / 1e9, period_s) - margin_s
        if slack_s <= 0 and not fixed:
            # Ticks overrun their period: text still gets a tenth of a period per tick rather than starving.
            slack_s = MIN_DECODE_SHARE * period_s
        try:
            events = self.runtime.decode(deadline=time.monotonic() + max(0.0, slack_s))
            self._publish_events(events)
        except Exception as exc:
            for port in self._ports:
                self._engine_error(port, "text decode", exc)
        finally:
            self._record_engine(self._ports)

    def _record_engine(self, ports: Sequence[RobotPorts]) -> None:
        """The engine's statistics and its peaks since the last look, for these robots' diagnostics."""
        stats, peaks, now_ns = self.runtime.stats(), self.runtime.take_peaks(), self._now_ns()
        for port in ports:
            port.diag.engine(stats, now_ns, peaks)

    def _skip(self, port: RobotPorts, kind: str, message: str) -> None:
        if kind == AFTER_CLOCK_JUMP and self._jumped_at_ns is not None:
            waited_s = (self._now_ns() - self._jumped_at_ns) / 1e9
            if waited_s <= self._jump_grace_s(port):  # the inputs of the new timeline are on their way
                port.diag.tick_waiting(message)
                return
        port.diag.tick_skipped(f"{kind}: {message}")
        self._hold(port, "input", f"{kind}: {message}")
        if kind in STARTUP_KINDS and port.last_chunk_s is None and time.monotonic() < self._grace_until:
            port.log.waiting(message)
        elif kind in LOST_KINDS and port.last_chunk_s is not None:
            port.log.inputs_lost(message)  # one line; /diagnostics shows the reason every period
        else:
            port.log.warn(kind, f"no action chunk this tick: {message}")

    def start_episode(self, seed: int, port: RobotPorts | None = None) -> None:
        """A simulator's episode began (on this robot, or on all): its action noise and text schedule from its seed,
        and commands blended from where the scene put the arm, as ``oxygen-sim eval``'s fresh guard per episode."""
        for p in [port] if port is not None else self._ports:
            self.runtime.start_episode(seed, p.key)
            if p.safety is not None:
                with p.outputs.lock:
                    p.safety.guard.start_over()

    # ---------------------------------------------------------------------------------- holds
    def _hold(self, port: RobotPorts, kind: str, reason: str, answer: bool = False) -> None:
        if port.safety is None:
            return
        try:
            port.safety.hold(kind, reason, answer)
        except InvalidHandle:  # the publishers are being destroyed (the node is going down): nothing to hold
            pass

    def _engine_error(self, port: RobotPorts, where: str, exc: BaseException) -> None:
        message = f"{where} failed: {type(exc).__name__}: {exc}"
        port.diag.engine_error(message)
        port.log.warn("engine_error", message)

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
        self._limits = JointLimits(new.joint_limits_lower, new.joint_limits_upper)
        for port in self._ports:
            port.store.max_instruction_chars = new.max_instruction_chars
            if port.outputs is not None:
                port.outputs.settings = new.for_robot(port.name)  # limits may have changed; the outputs are fixed
                port.outputs.guard.set_limits(new.limits, new.resume_blend_s)
                port.safety.settings = new.for_robot(port.name)
            port.diag.set_target_rate(self._chunk_rate_hz(port.name))  # the rates or the step period may have changed
        if (new.control_rate_hz, new.robot_control_rates_hz) != (old.control_rate_hz, old.robot_control_rates_hz):
            if self.active:
                self._clocks = self._robot_clocks()  # restarted at the next tick, every robot due then
                self._control_timer.timer_period_ns = int(round(new.tick_period_s * 1e9))

    # ------------------------------------------------------------------------------- shutdown
    def destroy_node(self) -> None:
        # The model thread reads the control timer: it must be gone before the timer's handle is destroyed.
        self._stopping.set()
        self._tick_wanted.set()
        if self._model_thread is not None:
            self._model_thread.join(timeout=30.0)
        self._jump_watch.close()
        for ask in self._asks.values():
            ask.destroy()
        super().destroy_node()

    def finish(self, timeout_s: float = 1.0) -> int:
        """Stop the node for good: cancel live text requests and questions and publish their final deltas
        (main.py calls it while the executor still spins, so they and the ~/ask results go out).

        Waits up to `timeout_s` in all for subscribers to acknowledge the text (the data itself is sent at
        once; an acknowledgement may wait for the writer's next heartbeat). Returns how many requests ended.
        """
        self._diag_timer.cancel()
        return self._deactivate(timeout_s)
