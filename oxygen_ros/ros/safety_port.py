"""One robot's safety I/O around its `SafetyGuard` (the logic is ROS-free: oxygen_ros/runtime/safety).

* The stop input: a ``std_msgs/Bool`` on ``stop_topic`` from any reliable publisher, volatile (``ros2 topic pub``,
  an e-stop bridge, a joystick) or latched (transient local: a stop set before the node started still counts),
  and the ``std_srvs/SetBool`` service ``~/set_stop``. True stops every command within one control period
  (every output to its hold command) while the model and its text go on; false resumes with the next chunk,
  from the measured state. A publisher no reader can hear (best effort) is warned about and counted.
* The watchdog (every control period, while active): a model that has not commanded a chunk for
  ``hold_timeout_s``, or inputs gone stale, make every output hold; one log line says why.
* The log: one warning at start naming what has no limits; at most every ``HITS_LOG_EVERY_S`` one warning
  naming what matters: refused chunks (by output, joint and reason) and clamps into a range by more than its
  tolerance (``range_far``). Limits a good policy meets in normal work (re-timed speeds, distances, small
  clamps at a range's end) are counted in diagnostics only.
* The ``<robot>: safety`` status of /diagnostics: RUN / HOLD / STOP, why, holds by kind, limit hits per output,
  joint and kind, refused chunks per output, joint and reason.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any, Callable

from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from rclpy.node import Node
from rclpy.qos import qos_policy_name_from_kind
from std_msgs.msg import Bool
from std_srvs.srv import SetBool

from oxygen_ros.interface.inputs import InputStore
from oxygen_ros.interface.settings import NodeSettings
from oxygen_ros.runtime.safety import HOLD, RANGE_TOLERANCE, RUN, STOP, LimitCounter, unguarded_lines

from .controller_outputs import ControllerOutputs
from .latched_topic import HISTORY_QOS, LiveAndLatchedSubscription
from .robot_log import RobotLog

__all__ = ["LATCHED", "SafetyPort", "SET_STOP_SERVICE"]

LATCHED = HISTORY_QOS  # a latched stop publisher's profile
SET_STOP_SERVICE = "~/set_stop"
HITS_LOG_EVERY_S = 2.0
WARN_KINDS = ("range_far",)  # limit hits worth a warning; the other kinds go to diagnostics only
EXPECTED_HOLDS = ("clock_jump", "deactivate")
_LEVEL = {RUN: DiagnosticStatus.OK, HOLD: DiagnosticStatus.WARN, STOP: DiagnosticStatus.WARN}


class SafetyPort:
    def __init__(self, node: Node, outputs: ControllerOutputs, store: InputStore, log: RobotLog, settings: NodeSettings,
                 n_action_steps: int, topic: Callable[[str], str], is_active: Callable[[], bool],
                 callback_group: Any, prefix: str, jump_epoch: Callable[[], int] = lambda: 0) -> None:  # fmt: skip
        self.node, self.outputs, self.guard = node, outputs, outputs.guard
        self.store, self.log, self.settings = store, log, settings
        self.n_action_steps = n_action_steps
        self._is_active = is_active
        self._jump_epoch = jump_epoch  # the node clock's jump epoch (odd while a jump is made and handled)
        self._name = f"{prefix}: safety"
        self._hits_logged_at = 0.0
        self._hits_pending: Counter[tuple[str, str, str]] = Counter()
        self._refusals_pending: Counter[tuple[str, str, str]] = Counter()
        self._stop_sent_ns = 0  # the send time of the latest stop message applied
        self._stop_order = threading.Lock()
        self.incompatible_stop_publishers = 0
        self._sub = LiveAndLatchedSubscription(node, Bool, topic(settings.stop_topic), self._on_stop,
                                               self._on_incompatible_stop, callback_group, history_beside_volatile=True)
        self._srv = node.create_service(SetBool, topic(SET_STOP_SERVICE), self._on_set_stop, callback_group=callback_group)
        self._timer = node.create_timer(settings.control_period_s, self._watch, callback_group=callback_group)
        self.unguarded = unguarded_lines(settings.outputs, settings.limits) if settings.publish_trajectory else []
        if self.unguarded:
            log.warning(f"no limits for {'; '.join(self.unguarded)}: these commands reach the "
                                "controllers unchecked in speed (set limit_joints, limit_max_velocity, ...: docs/safety.md)")

    @property
    def deadline_s(self) -> float:
        """How long commanding may go without a new chunk before the outputs hold."""
        s = self.settings
        return s.hold_timeout_s or self.n_action_steps * s.step_period_s + 2 * s.control_period_s

    # ---------------------------------------------------------------------------------------- holds
    def hold(self, kind: str, reason: str, answer: bool = False) -> None:
        """Every output to its hold command within this call; one log line when commanding was going on.
        ``answer``: the hold answers this tick's observation (a refused chunk) and is sent even while holding
        already, so that a simulator waiting for each observation's command steps on at its pace."""
        with self.outputs.lock:
            entered = self.guard.hold(kind, reason, self.node.get_clock().now().nanoseconds)
            if entered or answer:
                self.outputs.hold()
            if entered:
                # An expected event (a clock that jumps, a deactivation) says so as info; a failure warns.
                if kind in EXPECTED_HOLDS:
                    self.log.info(f"HOLD: {reason}")
                else:
                    self.log.warning(f"HOLD: {reason}")

    def _on_stop(self, msg: Bool, info: Any) -> None:
        sent_ns = int(info.get("source_timestamp", 0))
        with self._stop_order:
            if 0 < sent_ns < self._stop_sent_ns:  # a latched message read late: a later one was applied already
                return
            self._stop_sent_ns = max(self._stop_sent_ns, sent_ns)
            self.set_stop(bool(msg.data), "the stop topic")

    def _on_incompatible_stop(self, event: Any) -> None:
        self.incompatible_stop_publishers = int(event.total_count)
        self.log.warn("stop_qos", f"a publisher on {self._sub.topic} offers incompatible QoS "
                                  f"({qos_policy_name_from_kind(event.last_policy_kind)}): its stops are NOT received; "
                                  "publish stops reliable (volatile or transient local), or call ~/set_stop")

    def _on_set_stop(self, request: Any, response: Any) -> Any:
        response.success = True
        response.message = "stopped" if self.set_stop(bool(request.data), "the set_stop service") else "unchanged"
        if not request.data:
            response.message = "cleared: commands resume with the next chunk, from the measured state"
        return response

    def set_stop(self, latched: bool, source: str) -> bool:
        with self.outputs.lock:
            changed = self.guard.state.stop(latched, f"stopped by {source}")
            if changed and latched:
                self.guard.reset_outputs(self.node.get_clock().now().nanoseconds)
                self.outputs.hold()
        if changed:
            self.log.info(f"STOP set by {source}: every command stops (the model and its text go on)" if latched else
                          f"STOP cleared by {source}: commands resume with the next chunk, from the measured state")
        return changed

    # ------------------------------------------------------------------------------------- watchdog
    def _watch(self) -> None:
        self._log_hits()
        epoch = self._jump_epoch()
        now_ns = self.node.get_clock().now().nanoseconds
        # A time read while the clock jumps belongs to the other timeline (the jump itself holds the outputs).
        if epoch % 2 or self._jump_epoch() != epoch or not self._is_active() or self.guard.state.state != RUN:
            return
        last = self.outputs.last_commanded_ns
        if last is not None and now_ns - last > self.deadline_s * 1e9:
            self.hold("model_stall", f"no chunk for {(now_ns - last) / 1e9:.2f} s (deadline {self.deadline_s:.2f} s): "
                                     "the model stalls")
            return
        limit = self.settings.max_observation_age_s
        required = {t for t, optional in zip(self.store.cameras, self.store.optional) if t and not optional}
        if self.store.use_state:
            required.add("joint_states")
        for topic, age in self.store.ages_s(now_ns).items():
            if topic in required and (age is None or age > limit):
                what = "not received" if age is None else f"{age:.2f} s old (max_observation_age_s {limit:g})"
                self.hold("stale_input", f"input {topic} {what}")
                return

    def _log_hits(self) -> None:
        self._hits_pending.update({k: n for k, n in self.guard.hits.take_new().items() if k[2] in WARN_KINDS})
        self._refusals_pending.update(self.guard.refusals.take_new())
        now = time.monotonic()
        if (self._hits_pending or self._refusals_pending) and now - self._hits_logged_at >= HITS_LOG_EVERY_S:
            self._hits_logged_at = now
            parts = []
            if self._refusals_pending:
                parts.append(f"chunks refused, the outputs held (output/joint reason x count): "
                             f"{LimitCounter.describe(self._refusals_pending)}")
            if self._hits_pending:
                parts.append(f"commands clamped into a range by more than {RANGE_TOLERANCE:g} of it: "
                             f"{LimitCounter.describe(self._hits_pending)}")
            self.log.warning("; ".join(parts))
            self._hits_pending.clear()
            self._refusals_pending.clear()

    # ---------------------------------------------------------------------------------- diagnostics
    def status(self, hardware_id: str) -> DiagnosticStatus:
        state = self.guard.state
        message = {RUN: "RUN: commanding", HOLD: f"HOLD: {state.reason}", STOP: f"STOP: {state.reason}"}[state.state]
        values = {"state": state.state, "reason": state.reason, "deadline_s": f"{self.deadline_s:.3f}",
                  "unguarded": "; ".join(self.unguarded) or "none",
                  "stop_incompatible_publishers": str(self.incompatible_stop_publishers)}  # fmt: skip
        values.update({f"holds/{kind}": str(n) for kind, n in sorted(state.holds.items())})
        values.update({f"limit/{o}/{j}/{k}": str(n) for (o, j, k), n in sorted(self.guard.hits.snapshot().items())})
        values["refused_chunks"] = str(self.guard.refusals.chunks)
        values.update({f"refused/{o}/{j}/{r}": str(n) for (o, j, r), n in sorted(self.guard.refusals.snapshot().items())})
        return DiagnosticStatus(level=_LEVEL[state.state], name=self._name, message=message, hardware_id=hardware_id,
                                values=[KeyValue(key=k, value=v) for k, v in values.items()])  # fmt: skip

    def destroy(self) -> None:
        self._timer.cancel()
        self.node.destroy_timer(self._timer)
        self._sub.close()
        self.node.destroy_service(self._srv)
