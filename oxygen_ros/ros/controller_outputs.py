"""The node's controller outputs: one publisher per output, each sending its action dims in its message type,
every command through the robot's `SafetyGuard` (oxygen_ros/runtime/safety: limits, hold, stop).

joint_trajectory outputs send one JointTrajectory per chunk (timed as ``alignment`` says, then re-timed or cut
by the guard); float64_array, joint_group / joint_single (Interbotix) and twist outputs are streamed by a timer: the row of the latest chunk due now
held to the limits, a twist at least every ``TWIST_REPEAT_S`` (MoveIt Servo drops commands older than ~0.1 s),
and a zero command once when the chunk ends for velocity and twist outputs, so the robot stops instead of
repeating its last command. A position_step output sends the joints' measured positions plus the step due now
(nothing without a fresh measurement). `hold` sends every output its hold command at once: a trajectory to the
measured position, zero velocity, a zero twist.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np
from geometry_msgs.msg import TwistStamped
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import QoSProfile
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.interface.interbotix import MESSAGE_TYPES as INTERBOTIX_TYPES
from oxygen_ros.interface.interbotix import interbotix_msg, message_type
from oxygen_ros.interface.outputs import float64_array_msg, to_trajectory_msg, twist_msg
from oxygen_ros.interface.settings import NodeSettings
from oxygen_ros.runtime.alignment import align_chunk, aligned_trajectory
from oxygen_ros.runtime.outputs import TWIST_REPEAT_S, ChunkStream, OutputSpec, limits_for, step_targets
from oxygen_ros.runtime.safety import RUN, SafetyGuard, hold_trajectory

MSG_TYPES = {"joint_trajectory": JointTrajectory, "float64_array": Float64MultiArray, "twist": TwistStamped}


def msg_type(kind: str) -> Any:
    """An output type's message class (the Interbotix ones imported only where an output uses them)."""
    return message_type(kind) if kind in INTERBOTIX_TYPES else MSG_TYPES[kind]


class UnsafeChunk(ValueError):
    """The chunk is no command at all (non-finite, far out of range): the outputs hold instead."""


class ControllerOutputs:
    def __init__(
        self, node: Node, settings: NodeSettings, make_publisher: Callable[[Any, str, QoSProfile], Publisher],
        qos: QoSProfile, callback_group: Any = None,
    ) -> None:  # fmt: skip
        self.node = node
        self.settings = settings
        self.publishers = {s.name: make_publisher(msg_type(s.type), s.topic, qos) for s in settings.outputs}
        self.streamed = [s for s in settings.outputs if s.streamed]
        self.stream = ChunkStream()
        self.guard = SafetyGuard(settings.outputs, settings.limits, settings.step_period_s, settings.resume_blend_s,
                                 max_measured_age_s=max(settings.max_observation_age_s, 2 * settings.control_period_s))  # fmt: skip
        self.last_commanded_ns: int | None = None  # node clock: the latest chunk commanded
        self.lock = threading.RLock()  # a chunk, a stream command, a hold and the stop input never interleave
        self._moving: set[str] = set()  # streamed outputs that sent a command of the current chunk
        self._timer = None
        if self.streamed:
            period = settings.step_period_s
            if any(s.type == "twist" for s in self.streamed):
                period = min(period, TWIST_REPEAT_S)
            self._timer = node.create_timer(period, self._on_stream, callback_group=callback_group)

    def _now_ns(self) -> int:
        return self.node.get_clock().now().nanoseconds

    def publish_chunk(self, actions: np.ndarray, stamp_ns: int, latency_s: float, n_action_steps: int, mode: str) -> int:
        """Send a chunk: trajectories now, streamed outputs from their timer; the hold commands instead while the
        stop input is set.
        Returns the positions clamped; raises ChunkTooLate (nothing left to execute), UnsafeChunk (no command: the
        outputs hold) or ValueError (the chunk cannot be commanded)."""
        with self.lock:
            return self._publish_chunk(actions, stamp_ns, latency_s, n_action_steps, mode)

    def _publish_chunk(self, actions: np.ndarray, stamp_ns: int, latency_s: float, n_action_steps: int, mode: str) -> int:
        s = self.settings
        if self.guard.state.stopped:  # the chunk answered by the hold commands (a lockstep simulator steps on)
            self._hold()
            return 0
        values = {spec.name: spec.values(actions) for spec in s.outputs}  # converted once, checked and sent
        refusal = self.guard.check_chunk(values)  # counted by output, joint and reason
        if refusal is not None:
            raise UnsafeChunk(refusal)
        now_ns = self._now_ns()
        clamped = 0
        messages = []
        for spec in s.outputs:
            if spec.type != "joint_trajectory":
                continue
            limits = limits_for(spec, s.joint_names, s.joint_limits_lower, s.joint_limits_upper)
            timed, n = aligned_trajectory(values[spec.name], spec.joints, s.step_period_s, limits, stamp_ns, latency_s,
                                          n_action_steps, mode)  # fmt: skip
            guarded = self.guard.trajectory(spec, timed, now_ns)
            clamped += n
            if guarded is not None:
                messages.append((spec.name, to_trajectory_msg(guarded, spec.interface)))
        if self.streamed:
            timing = align_chunk(len(actions), s.step_period_s, stamp_ns, latency_s, n_action_steps, mode)
            start = timing.stamp_ns or now_ns
            self.stream.set(actions, start, timing.first, timing.times_s)
        self.guard.state.resumed()
        for name, msg in messages:
            self.publishers[name].publish(msg)
        self.last_commanded_ns = now_ns
        if self.streamed:
            self._stream_due()  # the first command goes out with the chunk
        return clamped

    def count_refusal(self, actions: np.ndarray) -> None:
        """Count a chunk refused before it reached `publish_chunk` (its message could not be made: NaN), as the
        guard counts the chunks it refuses."""
        try:
            self.guard.check_chunk({spec.name: spec.values(actions) for spec in self.settings.outputs})
        except (ValueError, IndexError):  # actions of another shape: the error itself is logged
            pass

    def hold(self) -> None:
        """Every output to its hold command now; the streamed chunk is dropped (the guard's state is the caller's)."""
        with self.lock:
            self._hold()

    def _hold(self) -> None:
        self.stream.clear()
        self._moving.clear()
        now_ns = self._now_ns()
        for spec in self.settings.outputs:
            command = self.guard.hold_command(spec, now_ns)
            if spec.type == "joint_trajectory":
                self.publishers[spec.name].publish(self._hold_trajectory(spec, command))
            elif command is not None:
                self._send(spec, command, now_ns)

    def _hold_trajectory(self, spec: OutputSpec, command: np.ndarray | None) -> JointTrajectory:
        held = hold_trajectory(spec, command, self.settings.step_period_s)
        if held is None:  # nothing measured: an empty trajectory makes a joint_trajectory_controller hold where it is
            return JointTrajectory(joint_names=list(spec.joints))
        return to_trajectory_msg(held, spec.interface)

    def _on_stream(self) -> None:
        with self.lock:
            self._stream_due()

    def _stream_due(self) -> None:
        now_ns = self._now_ns()
        row = self.stream.due(now_ns) if self.guard.state.state == RUN else None
        for spec in self.streamed:
            if row is not None and np.all(np.isfinite(row)):
                values = spec.values(row)
                if spec.steps:  # a target one step ahead of the joints as measured now
                    values = step_targets(values, self.guard.measured_of(spec, now_ns))
                    if values is None:
                        continue
                self._send(spec, self.guard.stream(spec, values, now_ns), now_ns)
                self._moving.add(spec.name)
            elif spec.name in self._moving:
                self._moving.discard(spec.name)
                if spec.type == "twist" or spec.interface == "velocity":
                    self._send(spec, np.zeros(len(spec.dims)), now_ns)
                    self.guard.outputs[spec.name].stopped(now_ns)

    def _send(self, spec: OutputSpec, values: np.ndarray, now_ns: int) -> None:
        if spec.type == "twist":
            self.publishers[spec.name].publish(twist_msg(values, spec.frame, now_ns))
        elif spec.type in INTERBOTIX_TYPES:
            self.publishers[spec.name].publish(interbotix_msg(spec.type, spec.group, values))
        else:
            self.publishers[spec.name].publish(float64_array_msg(values))

    def destroy(self, destroy_publisher: Callable[[Publisher], None]) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self.node.destroy_timer(self._timer)
            self._timer = None
        for pub in self.publishers.values():
            destroy_publisher(pub)
        self.publishers = {}
