"""Outputs for other ROS stacks: the JointTrajectory for a joint trajectory controller, and topic names.

The timing and clamping of the points live in the ROS-free `oxygen_ros.runtime.trajectory` (shared with
the simulator); this module only wraps them in (and reads them back from) `trajectory_msgs` messages.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from geometry_msgs.msg import TwistStamped
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from oxygen_ros.runtime.trajectory import JointLimits, TimedTrajectory, trajectory_points

from .convert import duration_from_s, ns_to_stamp, stamp_to_ns

__all__ = ["JointLimits", "final_text_topic", "float64_array_msg", "from_trajectory_msg", "text_topic", "to_trajectory_msg",
           "trajectory_msg", "twist_msg"]  # fmt: skip


def text_topic(task: str) -> str:
    """TextDelta stream of a task (private to the node's name)."""
    return f"~/text/{task}"


def final_text_topic(task: str) -> str:
    """The finished text of each request of a task, as std_msgs/String."""
    return f"~/text/{task}/final"


def to_trajectory_msg(trajectory: TimedTrajectory, interface: str = "position") -> JointTrajectory:
    """The values go to each point's ``positions``, or ``velocities`` for a velocity command interface."""
    msg = JointTrajectory()
    if trajectory.start_time_ns:
        msg.header.stamp = ns_to_stamp(trajectory.start_time_ns)  # else 0: "start now" for the controller
    msg.joint_names = list(trajectory.joint_names)
    for t, row in zip(trajectory.times_s, trajectory.positions):
        point = JointTrajectoryPoint()
        values = [float(x) for x in row]
        if interface == "velocity":
            point.velocities = values
        else:
            point.positions = values
        point.time_from_start = duration_from_s(float(t))
        msg.points.append(point)
    return msg


def from_trajectory_msg(msg: Any) -> TimedTrajectory:
    """A received JointTrajectory as plain data; ValueError says what is wrong with it."""
    names = tuple(str(n) for n in msg.joint_names)
    if not msg.points:
        raise ValueError("the trajectory has no points")
    rows = []
    for i, point in enumerate(msg.points):
        if len(point.positions) != len(names):
            raise ValueError(f"point {i} has {len(point.positions)} positions for {len(names)} joints")
        rows.append(np.asarray(point.positions, dtype=np.float64))
    times = [stamp_to_ns(p.time_from_start) * 1e-9 for p in msg.points]
    return TimedTrajectory(names, np.asarray(times), np.stack(rows), stamp_to_ns(msg.header.stamp))


def trajectory_msg(
    actions: np.ndarray,
    joint_names: Sequence[str],
    step_period_s: float,
    limits: JointLimits = JointLimits(),
) -> tuple[JointTrajectory, int]:
    """A JointTrajectory ("start now") from a (horizon, action_dim) chunk: see `trajectory_points`.

    Returns the message and how many positions were clamped; raises ValueError for chunks it cannot command.
    """
    trajectory, clamped = trajectory_points(actions, joint_names, step_period_s, limits)
    return to_trajectory_msg(trajectory), clamped


def float64_array_msg(values: np.ndarray) -> Float64MultiArray:
    """forward_command_controller's command: one value per joint, in its ``joints`` order."""
    if not np.all(np.isfinite(values)):
        raise ValueError("command values contain NaN or infinite values")
    return Float64MultiArray(data=[float(x) for x in np.asarray(values).ravel()])


def twist_msg(values: np.ndarray, frame: str, stamp_ns: int) -> TwistStamped:
    """MoveIt Servo's command: linear xyz then angular xyz, in ``frame``, stamped when sent."""
    v = [float(x) for x in np.asarray(values).ravel()]
    if len(v) != 6 or not all(np.isfinite(v)):
        raise ValueError(f"a twist needs 6 finite values, got {v}")
    msg = TwistStamped()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = frame
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = v[:3]
    msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = v[3:]
    return msg
