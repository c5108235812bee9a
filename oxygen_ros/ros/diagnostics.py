"""Health of the node as `diagnostic_msgs/DiagnosticArray` on /diagnostics.

`Diagnostics` collects what the model callbacks measure (thread-safe) and `report` turns it into four
statuses with OK/WARN/ERROR levels:

* control — achieved control rate (chunks per second over a sliding window) against the target, deadline
  misses (a tick whose work, observation to published chunk, took longer than one control period),
  prefill/action latency. ERROR when no chunk came for max(1 s, 3 periods); WARN while starting, when the
  rate is below 90 % of the target, or when deadlines were missed since the last report.
* inputs — every counter of refused (dropped), stale, missing and masked inputs and skipped ticks, with
  the totals dropped_inputs, stale_inputs and skipped_ticks. ERROR while the
  latest tick was skipped (the message says why); WARN when a counter grew since the last report.
* text — tokens per second over the window, decode latency and batch, live/waiting/refused requests.
  WARN when requests wait for KV memory or were refused since the last report.
* kv — KV memory in use and the budget. WARN above 90 % of the budget.

Times are node-clock nanoseconds (so the report follows sim time under `use_sim_time`).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

__all__ = ["Diagnostics", "LEVEL_NAMES", "diagnostic_array"]

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR
LEVEL_NAMES = {OK: "OK", WARN: "WARN", ERROR: "ERROR"}
_NS = 1_000_000_000
RATE_WARN_SHARE = 0.9  # WARN when the achieved action rate falls below this share of the target


@dataclass
class _Status:
    name: str
    level: bytes
    message: str
    values: dict[str, Any]


class Diagnostics:
    """Measurements of the running node; every method may be called from any thread."""

    def __init__(self, target_rate_hz: float, window_s: float = 3.0, prefix: str = "oxygen_ros") -> None:
        self.target_rate_hz = target_rate_hz
        self.window_ns = int(window_s * _NS)
        self.prefix = prefix
        self._lock = threading.Lock()
        self._first_tick_ns: int | None = None
        self._ticks = 0
        self._chunks: deque[int] = deque()  # publish times within the window
        self._chunks_total = 0
        self._last_chunk_ns: int | None = None
        self._misses = 0
        self._last_work_s = 0.0
        self._tokens: deque[tuple[int, int]] = deque()  # (time, tokens) within the window
        self._tokens_total = 0
        self._last_skip: str | None = None  # reason of the latest tick if it was skipped
        self._engine: Any = None  # latest EngineStats
        self._clamped = 0
        self._errors = 0
        self._reported: dict[str, int] = {}  # counters at the previous report

    # --------------------------------------------------------------------------- recording
    def tick_started(self, now_ns: int) -> None:
        with self._lock:
            self._ticks += 1
            if self._first_tick_ns is None:
                self._first_tick_ns = now_ns

    def chunk_published(self, now_ns: int, work_s: float) -> None:
        """A chunk left the node; `work_s` is the wall time from the tick's start."""
        with self._lock:
            self._chunks.append(now_ns)
            self._chunks_total += 1
            self._last_chunk_ns = now_ns
            self._last_work_s = work_s
            if work_s > 1.0 / self.target_rate_hz:
                self._misses += 1
            self._last_skip = None
            self._trim(now_ns)

    def tick_skipped(self, reason: str) -> None:
        with self._lock:
            self._last_skip = reason

    def engine_error(self, reason: str) -> None:
        with self._lock:
            self._errors += 1
            self._last_skip = reason

    def tokens(self, now_ns: int, n: int) -> None:
        if n <= 0:
            return
        with self._lock:
            self._tokens.append((now_ns, n))
            self._tokens_total += n
            self._trim(now_ns)

    def clamped(self, n: int) -> None:
        with self._lock:
            self._clamped += n

    def engine(self, stats: Any) -> None:
        """The engine's latest EngineStats (taken in the model thread, read by the report)."""
        with self._lock:
            self._engine = stats

    def set_target_rate(self, rate_hz: float) -> None:
        with self._lock:
            self.target_rate_hz = rate_hz

    def _trim(self, now_ns: int) -> None:
        start = now_ns - self.window_ns
        while self._chunks and self._chunks[0] <= start:
            self._chunks.popleft()
        while self._tokens and self._tokens[0][0] <= start:
            self._tokens.popleft()

    # ----------------------------------------------------------------------------- reporting
    def report(self, now_ns: int, counters: dict[str, int], hardware_id: str = "") -> list[DiagnosticStatus]:
        """Statuses for one DiagnosticArray; remembers the counters to flag growth next time."""
        with self._lock:
            self._trim(now_ns)
            statuses = [self._control(now_ns), self._inputs(counters), self._text(now_ns), self._kv()]
            self._reported = {**counters, "_misses": self._misses, "_refused": self._refused()}
        return [_to_msg(s, hardware_id) for s in statuses]

    def _elapsed_window_s(self, now_ns: int) -> float:
        if self._first_tick_ns is None:
            return 0.0
        return min(self.window_ns, max(0, now_ns - self._first_tick_ns)) / _NS

    def _control(self, now_ns: int) -> _Status:
        period_s = 1.0 / self.target_rate_hz
        span = self._elapsed_window_s(now_ns)
        rate = len(self._chunks) / span if span >= period_s else None
        e = self._engine
        values = {
            "target_rate_hz": self.target_rate_hz,
            "achieved_rate_hz": "n/a" if rate is None else round(rate, 3),
            "ticks": self._ticks,
            "chunks_published": self._chunks_total,
            "deadline_misses": self._misses,
            "last_tick_work_s": round(self._last_work_s, 6),
            "prefill_latency_s": round(e.last_prefill_s, 6) if e else "n/a",
            "action_latency_s": round(e.last_action_s, 6) if e else "n/a",
            "engine_errors": self._errors,
            "clamped_positions": self._clamped,
        }
        name = f"{self.prefix}: control"
        why = f": {self._last_skip}" if self._last_skip else ""
        if self._last_chunk_ns is None:
            return _Status(name, WARN, f"no action chunk yet{why}", values)
        silent_s = (now_ns - self._last_chunk_ns) / _NS
        if silent_s > max(1.0, 3 * period_s):
            return _Status(name, ERROR, f"no action chunk for {silent_s:.1f} s{why}", values)
        new_misses = self._misses - self._reported.get("_misses", 0)
        if rate is not None and rate < RATE_WARN_SHARE * self.target_rate_hz:
            return _Status(name, WARN, f"control rate {rate:.2f} Hz below target {self.target_rate_hz:g} Hz", values)
        if new_misses > 0:
            return _Status(name, WARN, f"{new_misses} ticks took longer than the control period", values)
        return _Status(name, OK, "running", values)

    def _inputs(self, counters: dict[str, int]) -> _Status:
        values: dict[str, Any] = {k: counters[k] for k in sorted(counters)}
        values["dropped_inputs"] = sum(v for k, v in counters.items() if k.startswith("rejected_"))
        values["stale_inputs"] = sum(v for k, v in counters.items() if k.startswith("skipped_stale_"))
        values["skipped_ticks"] = sum(v for k, v in counters.items() if k.startswith("skipped_"))
        name = f"{self.prefix}: inputs"
        if self._last_skip:
            return _Status(name, ERROR, f"no chunk: {self._last_skip}", values)
        grown = sorted(k for k, v in counters.items() if v > self._reported.get(k, 0))
        if grown:
            return _Status(name, WARN, f"inputs refused, stale or masked: {', '.join(grown)}", values)
        return _Status(name, OK, "inputs good", values)

    def _refused(self) -> int:
        return int(self._engine.refused_total) if self._engine else 0

    def _text(self, now_ns: int) -> _Status:
        e = self._engine
        span = self._elapsed_window_s(now_ns)
        tokens_window = sum(n for _, n in self._tokens)
        values: dict[str, Any] = {
            "tokens_per_s": round(tokens_window / span, 3) if span > 0 else 0.0,
            "tokens_published": self._tokens_total,
        }
        if e:
            values.update(
                tokens_generated=e.tokens_generated,
                decode_steps=e.decode_steps,
                decode_latency_s=round(e.last_decode_s, 6),
                decode_batch=e.last_decode_batch,
                live_requests=e.live_requests,
                waiting_requests=e.waiting_requests,
                refused_requests=e.refused_total,
            )
        name = f"{self.prefix}: text"
        new_refused = self._refused() - self._reported.get("_refused", 0)
        if new_refused > 0:
            return _Status(name, WARN, f"{new_refused} text requests refused (KV budget or queue full)", values)
        if e and e.waiting_requests > 0:
            return _Status(name, WARN, f"{e.waiting_requests} text requests waiting for KV memory", values)
        return _Status(name, OK, "decoding" if e and e.live_requests else "idle", values)

    def _kv(self) -> _Status:
        e = self._engine
        name = f"{self.prefix}: kv"
        if not e:
            return _Status(name, OK, "no engine statistics yet", {})
        used, budget = int(e.kv_used_bytes), int(e.kv_budget_bytes)
        share = used / budget if budget else 0.0
        values = {
            "kv_used_bytes": used,
            "kv_budget_bytes": budget,
            "kv_used_mib": round(used / 2**20, 3),
            "kv_budget_mib": round(budget / 2**20, 3),
            "kv_used_percent": round(100 * share, 2),
            "live_prefixes": e.live_prefixes,
        }
        if share > 0.9:
            return _Status(name, WARN, f"KV memory {100 * share:.0f} % of the budget", values)
        return _Status(name, OK, f"KV memory {100 * share:.1f} % of the budget", values)


def _to_msg(status: _Status, hardware_id: str) -> DiagnosticStatus:
    msg = DiagnosticStatus()
    msg.level = status.level
    msg.name = status.name
    msg.message = status.message
    msg.hardware_id = hardware_id
    msg.values = [KeyValue(key=k, value=str(v)) for k, v in status.values.items()]
    return msg


def diagnostic_array(stamp: Any, statuses: list[DiagnosticStatus]) -> DiagnosticArray:
    """Wrap statuses with a header stamp (a builtin_interfaces/Time)."""
    msg = DiagnosticArray()
    msg.header.stamp = stamp
    msg.status = statuses
    return msg
