"""Noticing jumps of the node clock as ROS does (tf2's buffer uses the same callbacks).

Under `use_sim_time` the node clock follows `/clock`, and rcl calls the clock's jump callbacks when a `/clock`
message moves it back (any amount, as tf2_ros does) or forward by more than `FORWARD_JUMP_S`, and when ROS time
is switched on or off. The first `/clock` message moves the clock from 0: that is the clock starting, not a
jump. Under system time rcl calls no jump callback, so `check` (called at each control tick) compares the
clock with the monotonic clock instead (`MonotonicCheck`).

`on_jump` is called from the thread that updated the clock (an executor thread for `/clock`) or from the
caller of `check`; it must be quick and must not block. `epoch` is odd from just before rcl moves the clock
until `on_jump` has returned: a reader that took the time while it changed (the same epoch, even, before
and after) knows its reading and the state it read belong to one timeline.
"""

from __future__ import annotations

from typing import Callable

from rclpy.clock import ClockChange, JumpHandle, JumpThreshold, ROSClock, TimeJump
from rclpy.duration import Duration

from oxygen_ros.runtime.clock_jumps import FORWARD_JUMP_S, ClockJump, MonotonicCheck

__all__ = ["ClockJumpWatch"]

_CHANGES = {ClockChange.ROS_TIME_ACTIVATED: "ROS time activated", ClockChange.ROS_TIME_DEACTIVATED: "ROS time deactivated"}


class ClockJumpWatch:
    def __init__(self, clock: ROSClock, on_jump: Callable[[ClockJump], None], forward_s: float = FORWARD_JUMP_S) -> None:
        self.clock = clock
        self.on_jump = on_jump
        self._monotonic = MonotonicCheck(forward_s)
        self.epoch = 0  # odd while a jump is being made and handled
        threshold = JumpThreshold(min_forward=Duration(nanoseconds=int(forward_s * 1e9)),
                                  min_backward=Duration(nanoseconds=-1), on_clock_change=True)  # fmt: skip
        self._handle: JumpHandle | None = clock.create_jump_callback(threshold, pre_callback=self._before_jump,
                                                                     post_callback=self._on_time_jump)  # fmt: skip

    def _before_jump(self) -> None:
        self.epoch += 1

    def _on_time_jump(self, jump: TimeJump) -> None:
        try:
            self._handle_jump(jump)
        finally:
            self.epoch += 1

    def _handle_jump(self, jump: TimeJump) -> None:
        now_ns = self.clock.now().nanoseconds
        delta_ns = jump.delta.nanoseconds
        self._monotonic.restart()
        change = _CHANGES.get(jump.clock_change, "")
        if not change and now_ns - delta_ns <= 0:
            return  # the first /clock message: sim time starts
        self.on_jump(ClockJump(delta_ns, now_ns, "/clock" if self.clock.ros_time_is_active else "clock", change))

    def check(self) -> None:
        """At a control tick: under system time, a step the monotonic clock shows (read here, both clocks
        together)."""
        if self.clock.ros_time_is_active:  # rcl watches ROS time and calls `_on_time_jump`
            self._monotonic.restart()
            return
        jump = self._monotonic.read(lambda: self.clock.now().nanoseconds)
        if jump is not None:
            self.on_jump(jump)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.unregister()
            self._handle = None
