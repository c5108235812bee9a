"""What the policy node restarts when its clock jumps (a mixin of `OxygenNode`): the inputs, the diagnostics'
windows and the outputs at once, the model thread's own timing at its next tick."""

from __future__ import annotations

from typing import Any, Sequence

from rclpy.exceptions import InvalidHandle

from oxygen_ros.runtime.clock_jumps import ClockJump

from .robot_clocks import RobotClocks
from .robot_ports import RobotPorts

__all__ = ["ClockJumps"]


class ClockJumps:
    """Clock-jump handling of `OxygenNode` (uses its ports, runtime, timers and jump bookkeeping)."""

    _ports: list[RobotPorts]
    runtime: Any
    settings: Any
    _clocks: RobotClocks | None

    def _on_clock_jump(self, jump: ClockJump) -> None:
        """The node clock jumped (called from the thread that moved it). What other threads read is dropped at
        once (inputs, diagnostics windows, the streamed chunk); the model thread restarts its own timing at its
        next tick (`_restart_after_jumps`), and a tick running now publishes nothing."""
        with self._jump_lock:
            self._timeline += 1
            self._pending_jumps.append(jump)
        ports = list(self._ports)
        dropped = 0
        for port in ports:
            dropped += port.store.restart(jump.now_ns - jump.delta_ns, jump.now_ns)
            port.diag.clock_jumped(jump)
            self._hold(port, "clock_jump", jump.describe())
        if self.active or self._ready:
            self.get_logger().info(f"{jump.describe()}: {self._what_restarts(ports, dropped)}")

    def _what_restarts(self, ports: Sequence[RobotPorts], dropped: int) -> str:
        """The info line's list of what a jump restarts, as configured."""
        rt = self.runtime
        parts = [
            "the last chunk" + (f" (replanning every {rt.n_action_steps} steps starts again)"
                                if rt.config.replan == "n_action_steps" else ""),
            "time alignment (latency measured anew)",
            *(["real-time-chunking guide"] if rt.config.rtc else []),
            f"inputs received before the jump ({dropped} dropped; stale-input ages start again)",
            "rate and silence windows of /diagnostics",
            *(["the controller outputs (held until the next chunk)"] if any(p.outputs for p in ports) else []),
            *(["the robots' tick schedule"] if self._clocks is not None else []),
        ]
        who = f" of robots {', '.join(p.name for p in ports)}" if self.settings.robots else ""
        return f"restarted the timing{who}: " + "; ".join(parts)

    def _restart_after_jumps(self) -> int:
        """In the model thread, before a tick: restart what it times after jumps reported since the last tick.
        Returns the timeline the tick runs on."""
        with self._jump_lock:
            jumps, self._pending_jumps = self._pending_jumps, []
            timeline = self._timeline
        if jumps:
            for port in self._ports:
                port.last_chunk_s = None  # replan at once
                port.last_latency_s = 0.0  # measured anew: one across the jump means nothing
                self.runtime.forget_chunk(port.key)  # no real-time-chunking guide toward the other timeline
            self._clocks = self._robot_clocks()  # every robot due at the next tick
            self._jumped_at_ns = jumps[-1].now_ns
        return timeline

    def _unstick_control_timer(self) -> None:
        """A control timer whose next call lies more than a period ahead was scheduled on the timeline the clock
        jumped back from (rcl moves it to the new one, but a timer call racing with the jump can put it back):
        restart it from now rather than wait until the clock gets there again."""
        timer = self._control_timer
        if timer is None or self._stopping.is_set():
            return
        try:
            left_ns = timer.time_until_next_call()
        except InvalidHandle:  # the timer was destroyed under the model thread (the node is going down)
            return
        if left_ns is not None and left_ns > 1.5 * timer.timer_period_ns:
            timer.reset()
            self.get_logger().info(f"control timer restarted: its next call was {left_ns / 1e9:.1f} s away, "
                                   "on the timeline before the clock jumped")

    def _jump_grace_s(self, port: RobotPorts) -> float:
        """How long after a jump missing inputs are expected (the diagnostics' silence limit)."""
        return max(1.0, 3 * self.settings.for_robot(port.name).control_period_s)
