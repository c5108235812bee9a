"""Health of the node as `diagnostic_msgs/DiagnosticArray` on /diagnostics.

`Diagnostics` collects what the model callbacks measure (thread-safe) and `report` turns it into four
statuses with OK/WARN/ERROR levels:

* control — achieved chunk rate against the target, deadline misses (a tick whose work, observation to
  published chunk, took longer than one control period), prefill/action latency, clock jumps. The rate comes
  from the chunks' own stamps (their observations' times) within the window: (chunks - 1) / (last stamp -
  first stamp), what a subscriber computes from the same chunks; fewer than two chunks give chunks / window
  (0 when none was published). ERROR when no chunk came for max(1 s, 3 periods); WARN while starting, when the
  rate is below 90 % of the target, or when deadlines were missed since the last report.
* inputs — every counter of refused (dropped), stale, missing and masked inputs and skipped ticks, with
  the totals dropped_inputs, stale_inputs and skipped_ticks. ERROR while the
  latest tick was skipped (the message says why); WARN when a counter grew since the last report.
* text — tokens per second over the window, decode latency and batch, live/waiting/refused requests, and the
  peak of live requests within the window (requests may start and end between two reports).
  WARN when requests wait for KV memory or were refused since the last report.
* kv — KV memory in use, its peak within the window, and the budget. WARN above 90 % of the budget.

Times are node-clock nanoseconds (so the report follows sim time under `use_sim_time`). When the clock jumps
(`clock_jumped`), the windows, the last chunk's time and the pending skip belong to the other timeline and
are dropped: the silence is measured from the jump, and the rate from the chunks after it. The jump is
counted and named in the control status.
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
EXPECTED_AFTER_JUMP = ("skipped_after_clock_jump", "dropped_after_clock_jump")  # inputs not yet sent again after a jump: no alarm
RATE_WARN_SHARE = 0.9  # WARN when the achieved action rate falls below this share of the target
MIN_WINDOW_PERIODS = 4  # the rate window spans at least this many target periods (two chunks even at low rates)


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
        self.window_s = window_s
        self.prefix = prefix
        self._lock = threading.Lock()
        self._first_tick_ns: int | None = None  # the first tick, or the clock jump that restarted the timeline
        self._ticks = 0
        self._chunks: deque[int] = deque()  # the stamps of the chunks within the window
        self._chunks_total = 0
        self._last_chunk_ns: int | None = None
        self._misses = 0
        self._last_work_s = 0.0
        self._tokens: deque[tuple[int, int]] = deque()  # (time, tokens) within the window
        self._tokens_total = 0
        self._last_skip: str | None = None  # reason of the latest tick if it was skipped
        self._waiting: str | None = None  # the latest tick waited for inputs sent again after a clock jump
        self._engine: Any = None  # latest EngineStats
        self._peaks: deque[tuple[int, int, int]] = deque()  # (time, KV bytes, live requests) peaks within the window
        self._jumps = {"back": 0, "forward": 0}
        self._last_jump: Any = None  # the latest ClockJump
        self._clamped = 0
        self._errors = 0
        self._reported: dict[str, int] = {}  # counters at the previous report

    # --------------------------------------------------------------------------- recording
    def tick_started(self, now_ns: int) -> None:
        with self._lock:
            self._ticks += 1
            if self._first_tick_ns is None:
                self._first_tick_ns = now_ns

    def chunk_published(self, now_ns: int, work_s: float, stamp_ns: int = 0) -> None:
        """A chunk stamped `stamp_ns` (its observation's time; 0 = none, the publish time counts) left the node
        at `now_ns`; `work_s` is the wall time from the tick's start."""
        with self._lock:
            self._chunks.append(stamp_ns if stamp_ns > 0 else now_ns)
            self._chunks_total += 1
            self._last_chunk_ns = now_ns
            self._last_work_s = work_s
            if work_s > 1.0 / self.target_rate_hz:
                self._misses += 1
            self._last_skip = self._waiting = None
            self._trim(now_ns)

    def tick_skipped(self, reason: str) -> None:
        with self._lock:
            self._last_skip, self._waiting = reason, None

    def tick_waiting(self, reason: str) -> None:
        """A tick found no inputs of the new timeline yet, just after a clock jump: no alarm."""
        with self._lock:
            self._last_skip, self._waiting = None, reason

    def clock_jumped(self, jump: Any) -> None:
        """The clock jumped (a `ClockJump`): counted; the windows and times of the other timeline dropped."""
        with self._lock:
            self._jumps["back" if jump.back else "forward"] += 1
            self._last_jump = jump
            self._first_tick_ns = jump.now_ns  # silence and rates are measured from the jump
            self._last_chunk_ns = None
            self._chunks.clear()
            self._tokens.clear()
            self._peaks.clear()
            self._last_skip = self._waiting = None

    @property
    def window_ns(self) -> int:
        return int(max(self.window_s, MIN_WINDOW_PERIODS / self.target_rate_hz) * _NS)

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

    def engine(self, stats: Any, now_ns: int | None = None, peaks: tuple[int, int] | None = None) -> None:
        """The engine's latest EngineStats (taken in the model thread, read by the report), and at `now_ns` the
        peak KV bytes and live requests since the previous call (`PolicyRuntime.take_peaks`)."""
        with self._lock:
            self._engine = stats
            if now_ns is not None and peaks is not None:
                self._peaks.append((now_ns, int(peaks[0]), int(peaks[1])))
                self._trim(now_ns)

    def set_target_rate(self, rate_hz: float) -> None:
        with self._lock:
            self.target_rate_hz = rate_hz

    def _trim(self, now_ns: int) -> None:
        start = now_ns - self.window_ns
        while self._chunks and self._chunks[0] <= start:
            self._chunks.popleft()
        while self._tokens and self._tokens[0][0] <= start:
            self._tokens.popleft()
        while self._peaks and self._peaks[0][0] <= start:
            self._peaks.popleft()

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

    def _rate(self, now_ns: int) -> tuple[float, int, bool]:
        """The achieved chunk rate from the chunks' stamps within the window, the number of those chunks, and
        whether the rate can be judged (two chunks, or a whole window since the timeline started)."""
        # Stamps within (now - window, now]: a chunk published just as the clock jumped may carry a stamp of the
        # other timeline, which lies outside.
        stamps = sorted(t for t in self._chunks if now_ns - self.window_ns < t <= now_ns)
        span_ns = stamps[-1] - stamps[0] if len(stamps) >= 2 else 0
        if span_ns > 0:
            return (len(stamps) - 1) * _NS / span_ns, len(stamps), True
        full = self._first_tick_ns is not None and now_ns - self._first_tick_ns >= self.window_ns
        return len(stamps) * _NS / self.window_ns, len(stamps), full

    def _control(self, now_ns: int) -> _Status:
        period_s = 1.0 / self.target_rate_hz
        rate, chunks, judged = self._rate(now_ns)
        e = self._engine
        jump = self._last_jump
        values = {
            "target_rate_hz": self.target_rate_hz,
            "achieved_rate_hz": round(rate, 3),
            "chunks_in_window": chunks,
            "rate_window_s": round(self.window_ns / _NS, 3),
            "ticks": self._ticks,
            "chunks_published": self._chunks_total,
            "deadline_misses": self._misses,
            "last_tick_work_s": round(self._last_work_s, 6),
            "prefill_latency_s": round(e.last_prefill_s, 6) if e else "n/a",
            "action_latency_s": round(e.last_action_s, 6) if e else "n/a",
            "engine_errors": self._errors,
            "clamped_positions": self._clamped,
            "clock_jumps_back": self._jumps["back"],
            "clock_jumps_forward": self._jumps["forward"],
            "last_clock_jump": jump.describe() if jump else "none",
        }
        name = f"{self.prefix}: control"
        why = f": {self._last_skip}" if self._last_skip else ""
        limit_s = max(1.0, 3 * period_s)
        if self._last_chunk_ns is None:
            if jump is None:
                return _Status(name, WARN, f"no action chunk yet{why}", values)
            silent_s = (now_ns - jump.now_ns) / _NS
            if silent_s > limit_s:
                return _Status(name, ERROR, f"no action chunk for {silent_s:.1f} s since the {jump.describe()}{why}", values)
            return _Status(name, OK, f"{jump.describe()}: timing restarted, the next chunk is due", values)
        silent_s = (now_ns - self._last_chunk_ns) / _NS
        if silent_s > limit_s:
            return _Status(name, ERROR, f"no action chunk for {silent_s:.1f} s{why}", values)
        new_misses = self._misses - self._reported.get("_misses", 0)
        if judged and rate < RATE_WARN_SHARE * self.target_rate_hz:
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
        grown = sorted(k for k, v in counters.items() if v > self._reported.get(k, 0) and k not in EXPECTED_AFTER_JUMP)
        if grown:
            return _Status(name, WARN, f"inputs refused, stale or masked: {', '.join(grown)}", values)
        if self._waiting:
            return _Status(name, OK, f"waiting for inputs after the clock jump: {self._waiting}", values)
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
                live_requests_peak=max((p[2] for p in self._peaks), default=e.live_requests),
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
        peak = max((p[1] for p in self._peaks), default=used)
        values = {
            "kv_used_bytes": used,
            "kv_peak_bytes": peak,
            "kv_budget_bytes": budget,
            "kv_used_mib": round(used / 2**20, 3),
            "kv_peak_mib": round(peak / 2**20, 3),
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
