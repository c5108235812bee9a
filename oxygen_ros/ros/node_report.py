"""What the policy node says: its start-up lines, the text it publishes and its /diagnostics (a mixin of
`OxygenNode`)."""

from __future__ import annotations

import time
from typing import Any, Sequence

from diagnostic_msgs.msg import DiagnosticStatus
from std_msgs.msg import String

from oxygen_ros.interface.convert import text_delta_msg
from oxygen_ros.runtime.startup import process_age_s

from .diagnostics import diagnostic_array
from .robot_ports import RobotPorts

__all__ = ["NodeReport"]


class NodeReport:
    """Log lines, text publication and the diagnostics report of `OxygenNode`."""

    _ports: list[RobotPorts]
    runtime: Any
    settings: Any

    def _log_start(self) -> None:
        s, rt = self.settings, self.runtime
        names = rt.image_slot_names  # every slot of the model, with the checkpoint's name and its topic
        topics = [*s.camera_topics, *[""] * (len(names) - len(s.camera_topics))]
        cameras = ", ".join(f"{i}:{names[i] if i < len(names) else i} <- {t or '(masked)'}"
                            f"{' [compressed]' if t and s.camera_compressed[i] else ''}" for i, t in enumerate(topics))
        tasks = ", ".join(f"{t.name}/every {t.every_n_frames}" for t in rt.config.tasks) or "none"
        model = rt.config.checkpoint or f"preset {rt.config.model_preset}"
        self.get_logger().info(
            f"ready: model {model} ({rt.config.engine_mode}, {rt.config.device}, {rt.dtype}); cameras {cameras}; "
            f"{len(s.joint_names)} joints; {s.control_rate_hz:g} Hz; text tasks {tasks}"
        )
        self.get_logger().info(rt.describe())
        if s.robots:
            ns = self.get_namespace().rstrip("/")
            self.get_logger().info(f"serving {len(s.robots)} robots from one model: " + ", ".join(
                f"{r} (topics under {ns}/{r}, {s.for_robot(r).control_rate_hz:g} Hz)" for r in s.robots))
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

    def _log_first_chunk(self, robot: str) -> None:
        """How long a robot waited for its first chunk: since activation, and since the process started (model
        loading and compiling, or loading the compiled code from the cache, included)."""
        self._awaiting_first_chunk.discard(robot)
        age = process_age_s()
        since_start = f", {age:.1f} s after the process started" if age is not None else ""
        self.get_logger().info(f"first chunk{f' of {robot}' if robot else ''}: "
                               f"{time.monotonic() - self._activated_at:.1f} s after activate{since_start}")

    def _publish_events(self, events: Sequence[Any]) -> None:
        """Publish TextDelta per event and, on a request's final event, its whole text as String, each on the
        topics of the robot whose frame the request was forked from."""
        if not events:
            return
        ports = {p.key: p for p in self._ports}
        now = self._now_ns()
        for key in dict.fromkeys(getattr(ev, "robot", "") for ev in events):
            port = ports.get(key)
            if port is None:
                continue
            mine = [ev for ev in events if getattr(ev, "robot", "") == key]
            port.ask.on_events(mine)
            tokens = 0
            for ev in mine:
                tokens += len(ev.token_ids)
                parts = self._text_parts.setdefault(ev.request_id, [])
                parts.append(ev.text)
                full = "".join(self._text_parts.pop(ev.request_id)) if ev.final else None
                pubs = port.text_pubs.get(ev.task)
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
            port.diag.tokens(now, tokens)

    def _on_diagnostics(self) -> None:
        # A report taken while the clock jumps (its time of one timeline, the windows of the other) would say
        # "no chunk for 60 s": such a report is taken again, or left to the next period.
        for _attempt in range(2):
            epoch = self._jump_watch.epoch
            if epoch % 2:
                return
            now = self.get_clock().now()
            statuses = []
            if self._ready:
                device = self.runtime.config.device
                for port in self._ports:
                    statuses += port.diag.report(now.nanoseconds, port.store.counters(), hardware_id=device)
                    statuses.append(port.topic_stats.status(device))
                    if port.safety is not None:
                        statuses.append(port.safety.status(device))
            statuses.append(self._state_status())
            if self._jump_watch.epoch == epoch:
                self._diag_pub.publish(diagnostic_array(now.to_msg(), statuses))
                return

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
