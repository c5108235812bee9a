"""The node's controller outputs: one publisher per output, each sending its action dims in its message type.

joint_trajectory outputs send one JointTrajectory per chunk (timed as ``alignment`` says); float64_array and
twist outputs are streamed by a timer: the row of the latest chunk due now, a twist at least every
``TWIST_REPEAT_S`` (MoveIt Servo drops commands older than ~0.1 s), and a zero command once when the chunk
ends for velocity and twist outputs, so the robot stops instead of repeating its last command. A position_step output
sends the joints' measured positions plus the step due now; without a fresh joint state it sends nothing.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from geometry_msgs.msg import TwistStamped
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import QoSProfile
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.interface.outputs import float64_array_msg, to_trajectory_msg, twist_msg
from oxygen_ros.interface.settings import NodeSettings
from oxygen_ros.runtime.alignment import align_chunk, aligned_trajectory
from oxygen_ros.runtime.outputs import TWIST_REPEAT_S, ChunkStream, OutputSpec, limits_for, step_targets

MSG_TYPES = {"joint_trajectory": JointTrajectory, "float64_array": Float64MultiArray, "twist": TwistStamped}


class ControllerOutputs:
    def __init__(
        self, node: Node, settings: NodeSettings, make_publisher: Callable[[Any, str, QoSProfile], Publisher],
        qos: QoSProfile, callback_group: Any = None, measured_state: Callable[[], np.ndarray | None] = lambda: None,
    ) -> None:  # fmt: skip
        self.node = node
        self.measured_state = measured_state  # the latest fresh joint state (joint_names order) for position_step
        self.settings = settings
        self.publishers = {s.name: make_publisher(MSG_TYPES[s.type], s.topic, qos) for s in settings.outputs}
        self.streamed = [s for s in settings.outputs if s.streamed]
        self.stream = ChunkStream()
        self._moving: set[str] = set()  # streamed outputs that sent a command of the current chunk
        self._timer = None
        if self.streamed:
            period = settings.step_period_s
            if any(s.type == "twist" for s in self.streamed):
                period = min(period, TWIST_REPEAT_S)
            self._timer = node.create_timer(period, self._on_stream, callback_group=callback_group)

    def publish_chunk(self, actions: np.ndarray, stamp_ns: int, latency_s: float, n_action_steps: int, mode: str) -> int:
        """Send a chunk: trajectories now, streamed outputs from their timer. Returns the positions clamped;
        raises ChunkTooLate (nothing left to execute) or ValueError (the chunk cannot be commanded)."""
        s = self.settings
        clamped = 0
        messages = []
        for spec in s.outputs:
            if spec.type != "joint_trajectory":
                continue
            limits = limits_for(spec, s.joint_names, s.joint_limits_lower, s.joint_limits_upper)
            timed, n = aligned_trajectory(spec.values(actions), spec.joints, s.step_period_s, limits, stamp_ns, latency_s,
                                          n_action_steps, mode)  # fmt: skip
            clamped += n
            messages.append((spec.name, to_trajectory_msg(timed, spec.interface)))
        if self.streamed:
            timing = align_chunk(len(actions), s.step_period_s, stamp_ns, latency_s, n_action_steps, mode)
            start = timing.stamp_ns or self.node.get_clock().now().nanoseconds
            self.stream.set(actions, start, timing.first, timing.times_s)
        for name, msg in messages:
            self.publishers[name].publish(msg)
        if self.streamed:
            self._on_stream()  # the first command goes out with the chunk
        return clamped

    def stop(self) -> None:
        """No chunk any more (deactivated, or the clock jumped and the chunk's start time belongs to the other
        timeline): velocity and twist outputs get their zero command."""
        self.stream.clear()
        self._on_stream()

    def _on_stream(self) -> None:
        now_ns = self.node.get_clock().now().nanoseconds
        row = self.stream.due(now_ns)
        for spec in self.streamed:
            if row is not None and np.all(np.isfinite(row)):
                values = spec.values(row)
                if spec.steps:
                    values = step_targets(spec, values, self.measured_state(), self.settings.joint_names)
                    if values is None:
                        continue
                self._send(spec, values, now_ns)
                self._moving.add(spec.name)
            elif spec.name in self._moving:
                self._moving.discard(spec.name)
                if spec.type == "twist" or spec.interface == "velocity":
                    self._send(spec, np.zeros(len(spec.dims)), now_ns)

    def _send(self, spec: OutputSpec, values: np.ndarray, now_ns: int) -> None:
        if spec.type == "twist":
            self.publishers[spec.name].publish(twist_msg(values, spec.frame, now_ns))
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
