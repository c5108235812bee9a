"""Unified KV cache manager: shared frame prefixes, text requests, admission and back-pressure.

The pool is shared by every robot an engine serves; each robot (``owner``) has a reserved scratch of one
prefix, so whatever the text requests of all robots hold, every robot's next action prefill finds room.
Waiting requests carry their owner and fork only from that owner's frames.

Not thread-safe: one engine thread owns the manager.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from oxygen_ros.kv.pool import Extent, KVPool
from oxygen_ros.kv.prefix import SharedPrefix
from oxygen_ros.kv.request import FINISH_REASONS, TextRequest


@dataclass
class WaitingSpec:
    """A request that could not start yet; it holds no KV and will fork from a later frame's prefix."""

    id: int
    task: str
    continuation: list[int]
    max_tokens: int
    frame_seq: int
    created_at: float = field(default_factory=time.monotonic)
    owner: str = ""  # the robot whose frames it forks from


@dataclass
class Admission:
    """Outcome of :meth:`KVCacheManager.submit`.

    ``request_id`` identifies the submission whatever its status (a waiting spec keeps it when it
    starts). ``dropped`` lists older waiting specs refused with reason "queue_full" by this call.
    """

    status: Literal["admitted", "waiting", "refused"]
    request: TextRequest | None
    reason: str
    request_id: int = -1
    dropped: list[WaitingSpec] = field(default_factory=list)


@dataclass
class KVStats:
    """Memory and bookkeeping figures; ``used_bytes`` excludes the reserved scratch (``reserved_bytes``)."""

    used_bytes: int
    capacity_bytes: int
    budget_bytes: int
    reserved_bytes: int
    live_prefixes: int
    live_requests: int
    waiting: int
    refused_total: int
    admitted_total: int
    finished_total: int
    scratch_in_use: bool


class KVCacheManager:
    """Owns a :class:`KVPool`: frame prefixes (ref-counted), text requests and their admission."""

    def __init__(self, pool: KVPool, reserve_tokens: int,
                 admission: Literal["wait", "refuse"] = "wait", max_waiting: int = 64) -> None:
        if admission not in ("wait", "refuse"):
            raise ValueError(f"KVCacheManager: admission must be 'wait' or 'refuse', got {admission!r}")
        if reserve_tokens <= 0 or max_waiting < 0:
            raise ValueError(f"KVCacheManager: need reserve_tokens > 0 and max_waiting >= 0, "
                             f"got {reserve_tokens} and {max_waiting}")
        scratch = pool.allocate(reserve_tokens)
        if scratch is None:
            raise ValueError(f"KVCacheManager: reserve_tokens={reserve_tokens} does not fit in a pool of "
                             f"{pool.largest_free_run} free contiguous tokens")
        self.pool, self.reserve_tokens, self.admission, self.max_waiting = pool, reserve_tokens, admission, max_waiting
        self._scratches: list[Extent] = [scratch]  # one per robot served: its action prefill's floor
        self._scratch_users: dict[int, SharedPrefix] = {}  # scratch start → the prefix living there
        self._prefixes: dict[int, SharedPrefix] = {}
        self._running: dict[int, TextRequest] = {}
        self._waiting: deque[WaitingSpec] = deque()
        self._next_prefix_id = 0
        self._next_request_id = 0
        self._refused = self._admitted = self._finished = 0
        self._peak_running = 0  # the most live requests at once since `take_peaks`

    # -- prefixes ---------------------------------------------------------------------------------
    @property
    def reserved_tokens(self) -> int:
        """Slots kept back for action prefills: one prefix per robot."""
        return self.reserve_tokens * len(self._scratches)

    def add_reserve(self) -> None:
        """Keep back one more prefix of slots (an engine serving one more robot)."""
        scratch = self.pool.allocate(self.reserve_tokens)
        if scratch is None:
            raise ValueError(f"KVCacheManager: no room for another action reserve of {self.reserve_tokens} tokens "
                             f"({self.pool.largest_free_run} free contiguous); raise the KV budget")
        self._scratches.append(scratch)

    def new_prefix(self, n_tokens: int, frame_seq: int, stamp_ns: int) -> SharedPrefix:
        """Room for one frame's prefix (refcount 1, held by the caller): arena first, else a free scratch."""
        if not 0 < n_tokens <= self.reserve_tokens:
            raise ValueError(f"new_prefix: n_tokens={n_tokens} must be in 1..reserve_tokens={self.reserve_tokens}")
        extent, shareable = self.pool.allocate(n_tokens), True
        if extent is None:
            free = [x for x in self._scratches if x.start not in self._scratch_users]
            if not free:
                holder = self._scratch_users[self._scratches[0].start]
                raise RuntimeError(f"new_prefix: arena full and the action scratch is still held by prefix "
                                   f"{holder.id} (frame {holder.frame_seq}); "
                                   f"release the previous prefix before prefilling")
            extent, shareable = Extent(free[0].start, n_tokens), False
        prefix = SharedPrefix(self._next_prefix_id, frame_seq, stamp_ns, extent, n_tokens, 1, shareable)
        self._next_prefix_id += 1
        self._prefixes[prefix.id] = prefix
        if not shareable:
            self._scratch_users[extent.start] = prefix
        return prefix

    def retain(self, prefix: SharedPrefix) -> None:
        if prefix.refcount <= 0:
            raise RuntimeError(f"retain: prefix {prefix.id} (frame {prefix.frame_seq}) was already released")
        prefix.refcount += 1

    def release(self, prefix: SharedPrefix) -> None:
        """Drop one reference; the last one returns the prefix's slots."""
        if prefix.refcount <= 0 or self._prefixes.get(prefix.id) is not prefix:
            raise RuntimeError(f"release: prefix {prefix.id} (frame {prefix.frame_seq}) is not live (double release?)")
        prefix.refcount -= 1
        if prefix.refcount == 0:
            del self._prefixes[prefix.id]
            if prefix.shareable:
                self.pool.free(prefix.extent)
            else:
                del self._scratch_users[prefix.extent.start]

    # -- requests ---------------------------------------------------------------------------------
    def new_request_id(self) -> int:
        """Reserve a request id ahead of :meth:`submit` (e.g. for a question that forks at the next frame)."""
        rid = self._next_request_id
        self._next_request_id += 1
        return rid

    def submit(self, task: str, prefix: SharedPrefix, continuation: list[int], max_tokens: int,
               frame_seq: int, stamp_ns: int, request_id: int | None = None, owner: str = "") -> Admission:
        """Start a text request from ``prefix`` now, queue it for a later frame of ``owner``, or refuse it.

        ``request_id`` is one reserved with :meth:`new_request_id`; None takes the next id."""
        if not continuation or max_tokens <= 0:
            raise ValueError(f"submit({task!r}): need a non-empty continuation and max_tokens > 0, "
                             f"got {len(continuation)} tokens and max_tokens={max_tokens}")
        if not prefix.alive:
            raise RuntimeError(f"submit({task!r}): prefix {prefix.id} was already released")
        rid = self.new_request_id() if request_id is None else request_id
        need = len(continuation) + max_tokens
        # Even an empty arena must hold a frame prefix of this size next to the request's own extent.
        if need + prefix.length > self.pool.capacity_tokens - self.reserved_tokens:
            self._refused += 1
            return Admission("refused", None, "too_large", rid)
        if prefix.shareable:
            request = self._start(rid, task, prefix, list(continuation), max_tokens, frame_seq, stamp_ns)
            if request is not None:
                return Admission("admitted", request, "", rid)
        reason = "no_kv_memory" if prefix.shareable else "prefix_not_shareable"
        if self.admission == "refuse" or self.max_waiting == 0:
            self._refused += 1
            return Admission("refused", None, reason if self.admission == "refuse" else "queue_full", rid)
        dropped = []
        while len(self._waiting) >= self.max_waiting:
            dropped.append(self._waiting.popleft())
            self._refused += 1
        self._waiting.append(WaitingSpec(rid, task, list(continuation), max_tokens, frame_seq, owner=owner))
        return Admission("waiting", None, reason, rid, dropped)

    def admit_waiting(self, prefix: SharedPrefix, frame_seq: int, stamp_ns: int, owner: str = "") -> list[TextRequest]:
        """Start ``owner``'s waiting specs in FIFO order from this frame's prefix until the first does not fit."""
        started: list[TextRequest] = []
        for spec in [s for s in self._waiting if s.owner == owner]:
            if not (prefix.shareable and prefix.alive):
                break
            request = self._start(spec.id, spec.task, prefix, spec.continuation, spec.max_tokens,
                                  frame_seq, stamp_ns, spec.created_at)
            if request is None:
                break
            self._waiting.remove(spec)
            started.append(request)
        return started

    def _start(self, rid: int, task: str, prefix: SharedPrefix, continuation: list[int], max_tokens: int,
               frame_seq: int, stamp_ns: int, created_at: float | None = None) -> TextRequest | None:
        extent = self.pool.allocate(len(continuation) + max_tokens)
        if extent is None:
            return None
        self.retain(prefix)
        request = TextRequest(rid, task, frame_seq, stamp_ns, prefix, extent, continuation, max_tokens)
        if created_at is not None:
            request.created_at = created_at  # latency counts the time spent waiting
        self._running[rid] = request
        self._peak_running = max(self._peak_running, len(self._running))
        self._admitted += 1
        return request

    def refusal(self, n_tokens: int, prefix_tokens: int, pending_tokens: int = 0) -> str | None:
        """Why a request needing ``n_tokens`` of its own, forked from a prefix of ``prefix_tokens``, would be
        refused now (None: it would start or wait). ``pending_tokens`` are already promised to others.

        Reads only counters, so another thread may call it for a quick answer (the real admission decides)."""
        if n_tokens + prefix_tokens > self.pool.capacity_tokens - self.reserved_tokens:
            return (f"too large: {n_tokens} tokens plus a {prefix_tokens}-token frame prefix do not fit the KV budget "
                    f"of {self.pool.capacity_tokens - self.reserved_tokens} tokens")
        room = self.pool.free_tokens - pending_tokens - prefix_tokens
        if n_tokens <= room:
            return None
        if self.admission == "refuse":
            return f"no KV memory: {n_tokens} tokens needed, {max(0, room)} free (admission 'refuse')"
        if len(self._waiting) >= self.max_waiting:
            return f"queue full: {len(self._waiting)} requests already wait for KV memory (max_waiting {self.max_waiting})"
        return None

    def cancel_waiting(self, request_id: int) -> WaitingSpec | None:
        """Drop a waiting spec (it holds no KV); returns it, or None when no spec has this id."""
        for spec in self._waiting:
            if spec.id == request_id:
                self._waiting.remove(spec)
                return spec
        return None

    def finish(self, request: TextRequest, reason: str) -> None:
        """Mark finished, free its extent and drop its prefix reference; a second call is a no-op."""
        if reason not in FINISH_REASONS:
            raise ValueError(f"finish: unknown reason {reason!r}, expected one of {FINISH_REASONS}")
        if request.finished or self._running.get(request.id) is not request:
            return
        request.finished, request.finish_reason = True, reason
        del self._running[request.id]
        self.pool.free(request.extent)
        self.release(request.prefix)
        self._finished += 1

    def running(self) -> list[TextRequest]:
        """Live requests in id order."""
        return sorted(self._running.values(), key=lambda r: r.id)

    def get(self, request_id: int) -> TextRequest | None:
        """The live request with this id, or None."""
        return self._running.get(request_id)

    @property
    def waiting_count(self) -> int:
        return len(self._waiting)

    def waiting_of(self, owner: str) -> int:
        return sum(spec.owner == owner for spec in self._waiting)

    def waiting_ids(self, owner: str | None = None) -> list[int]:
        """Ids of the waiting specs (of one owner, or all), oldest first."""
        return [spec.id for spec in self._waiting if owner is None or spec.owner == owner]

    # -- lifecycle --------------------------------------------------------------------------------
    def stats(self) -> KVStats:
        reserved = self.reserved_tokens * self.pool.bytes_per_token
        return KVStats(
            used_bytes=self.pool.used_bytes - reserved, capacity_bytes=self.pool.capacity_bytes,
            budget_bytes=self.pool.capacity_bytes, reserved_bytes=reserved,
            live_prefixes=len(self._prefixes), live_requests=len(self._running), waiting=len(self._waiting),
            refused_total=self._refused, admitted_total=self._admitted, finished_total=self._finished,
            scratch_in_use=bool(self._scratch_users))

    def take_peaks(self) -> tuple[int, int]:
        """The peak KV bytes in use (as ``stats().used_bytes`` counts them) and the peak of live requests since
        the previous call; both start again from the current values. Requests may start and end between two
        looks at ``stats``: the peaks are what was held at once."""
        reserved = self.reserved_tokens * self.pool.bytes_per_token
        peaks = (max(0, self.pool.peak_used_tokens * self.pool.bytes_per_token - reserved), self._peak_running)
        self.pool.restart_peak()
        self._peak_running = len(self._running)
        return peaks

    def close(self) -> None:
        """Cancel every request, drop waiting specs and release every prefix, whoever holds it."""
        for request in self.running():
            self.finish(request, "cancelled")
        self._waiting.clear()
        for prefix in list(self._prefixes.values()):
            prefix.refcount = 1
            self.release(prefix)
