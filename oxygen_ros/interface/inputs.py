"""The latest inputs of the node: one image per camera slot, the joint state and the instruction.

Subscription callbacks (any thread) only store what arrived, already converted, or the reason it was
refused; the control tick takes a consistent `snapshot` under the same lock. Staleness is judged at the
tick with the node clock (so `use_sim_time` and bag replay work): an input whose header stamp (the receive
time when the stamp is zero) is more than `max_age` away from now is stale.

A refused or stale input never yields a chunk built from something else: a required camera, the joint
state or the instruction that is bad, stale or missing makes the snapshot fail with an `ObservationError`
naming the reason; an optional camera in that state is a masked slot instead.

When the clock jumps, `restart` drops the images and joint states received before the jump (their stamps
belong to the other timeline); until a new one arrives the snapshot fails with the kind "after_clock_jump"
rather than "stale_*" or "missing_*". Messages of the other timeline still on their way are dropped (counted) as
they arrive, each input until its first message of the new timeline (one topic's messages arrive in order, so
none of the old timeline can follow; a camera masked in the first observations is still guarded). A message is
of the old timeline when its stamp lies nearer what the clock would read at its arrival had it not jumped than
what it reads: after any jump, messages stamped on the new clock are taken at once, however small the jump and
however late they come. The instruction is kept: it is not tied to a time.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

__all__ = ["AFTER_CLOCK_JUMP", "InputStore", "KNOWN_COUNTERS", "Observation", "ObservationError"]

# rejected_*: messages refused on arrival (dropped); skipped_*: ticks without a chunk, by reason;
# masked_slot: ticks where an optional camera was masked.
KNOWN_COUNTERS = (
    "rejected_image", "rejected_joint_state", "rejected_instruction", "masked_slot",
    "skipped_missing_image", "skipped_rejected_image", "skipped_stale_image", "skipped_no_camera",
    "skipped_missing_joint_state", "skipped_rejected_joint_state", "skipped_stale_joint_state",
    "skipped_missing_instruction", "skipped_rejected_instruction", "skipped_after_clock_jump",
    "dropped_after_clock_jump",
)
AFTER_CLOCK_JUMP = "after_clock_jump"


class ObservationError(Exception):
    """No observation can be built this tick. `kind` keys the skip counter (e.g. "stale_image")."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class _Sample:
    """The latest message of one input: its value, or the reason it was refused."""

    value: object | None
    error: str | None
    stamp_ns: int
    recv_ns: int
    frame_id: str = ""

    @property
    def dropped_at_jump(self) -> bool:
        """A placeholder for an input dropped at a clock jump (neither a value nor a refusal)."""
        return self.value is None and self.error is None

    def age_ns(self, now_ns: int) -> int:
        """Distance from now, in either direction (a stamp far in the future is as wrong as an old one)."""
        reference = self.stamp_ns if self.stamp_ns > 0 else self.recv_ns
        return abs(now_ns - reference)


@dataclass
class Observation:
    """What the control tick feeds the runtime."""

    images: list[np.ndarray | None]  # one per configured slot; None = masked
    state: np.ndarray | None
    instruction: str
    stamp_ns: int  # stamp of the first camera used (the observation's time)
    frame_id: str
    masked: list[int] = field(default_factory=list)  # optional slots masked this tick


class InputStore:
    """Thread-safe store of the latest inputs and counters of refused/stale/missing ones.

    `cameras[i]` is the topic of slot i ("" = no camera, always masked); `optional[i]` says whether a
    slot may be masked when its image is missing, stale or bad; `sizes[i]` is the expected (width,
    height), 0 meaning any. `use_state` = False ignores joint states (no state in the observation).
    `state_parts` splits the state between several joint-state topics: per topic, its name and the state
    indices it fills (each topic's latest message is judged on its own); empty = one source of the whole state.
    """

    def __init__(
        self,
        cameras: Sequence[str],
        optional: Sequence[bool],
        sizes: Sequence[tuple[int, int]],
        use_state: bool,
        max_instruction_chars: int = 2000,
        state_parts: Sequence[tuple[str, Sequence[int]]] = (),
    ) -> None:
        if not (len(cameras) == len(optional) == len(sizes)):
            raise ValueError("cameras, optional and sizes need one entry per slot")
        self.cameras = list(cameras)
        self.optional = list(optional)
        self.sizes = list(sizes)
        self.use_state = use_state
        self.max_instruction_chars = max_instruction_chars
        self._lock = threading.Lock()
        self._images: list[_Sample | None] = [None] * len(cameras)
        self.state_parts = [(str(t), tuple(int(i) for i in idx)) for t, idx in state_parts]
        self._states: list[_Sample | None] = [None] * max(1, len(self.state_parts))
        self._instruction: _Sample | None = None
        self._jump: tuple[int, int] | None = None  # (clock before, clock after) the latest jump
        self._restarts = 0  # jumps so far: a receive time read under another count may be of the old timeline
        self._unsettled: set[int | str] = set()  # inputs (slots, "state<i>") with no message of the new timeline yet
        # Known counters start at 0 so /diagnostics always shows the same keys.
        self._counters: Counter[str] = Counter({k: 0 for k in KNOWN_COUNTERS})

    # ------------------------------------------------------------------------------ receiving
    @property
    def timeline(self) -> int:
        """The number of jumps so far: a receiver reads it before its receive time and passes it with the message."""
        return self._restarts

    def put_image(self, slot: int, image: np.ndarray, stamp_ns: int, recv_ns: int, frame_id: str = "",
                  timeline: int | None = None) -> str | None:  # fmt: skip
        """Store a converted HxWx3 image; returns the refusal reason if its size is not the slot's.
        ``timeline``: `timeline` read before ``recv_ns`` (None: ``recv_ns`` is of the latest timeline)."""
        if self._from_other_timeline(slot, stamp_ns, recv_ns, timeline):
            return None
        width, height = self.sizes[slot]
        h, w = image.shape[:2]
        if (width and w != width) or (height and h != height):
            want = f"{width or 'any'}x{height or 'any'}"
            return self.reject_image(slot, f"image is {w}x{h}, slot {slot} expects {want} (camera_widths/camera_heights: "
                                           "send that size, or set the camera's size there)", stamp_ns, recv_ns)  # fmt: skip
        with self._lock:
            self._images[slot] = _Sample(image, None, stamp_ns, recv_ns, frame_id)
        return None

    def reject_image(self, slot: int, reason: str, stamp_ns: int, recv_ns: int) -> str:
        """Record a refused image: the slot has no usable image until a good one arrives."""
        message = f"camera slot {slot} ({self.cameras[slot]}): {reason}"
        with self._lock:
            self._images[slot] = _Sample(None, message, stamp_ns, recv_ns)
            self._counters["rejected_image"] += 1
        return message

    def put_joint_state(self, positions: np.ndarray, stamp_ns: int, recv_ns: int, source: int = 0,
                        timeline: int | None = None) -> None:  # fmt: skip
        """Store the positions one joint-state topic gives (``source``: its index in ``state_parts``)."""
        if self._from_other_timeline(f"state{source}", stamp_ns, recv_ns, timeline):
            return
        with self._lock:
            self._states[source] = _Sample(np.asarray(positions, dtype=np.float64), None, stamp_ns, recv_ns)

    def reject_joint_state(self, reason: str, stamp_ns: int, recv_ns: int, source: int = 0) -> str:
        message = f"joint state{self._source_name(source)}: {reason}"
        with self._lock:
            self._states[source] = _Sample(None, message, stamp_ns, recv_ns)
            self._counters["rejected_joint_state"] += 1
        return message

    def _source_name(self, source: int) -> str:
        return f" ({self.state_parts[source][0]})" if len(self.state_parts) > 1 else ""

    def put_instruction(self, text: str, recv_ns: int, sent_ns: int = 0) -> str | None:
        """Store an instruction; returns the refusal reason for an empty or over-long one.

        ``sent_ns`` (the publisher's send time, 0 = unknown) orders instructions that arrive by two paths: one
        sent before the stored one (a latched copy delivered late) is ignored."""
        stripped = text.strip()
        reason = None
        if not stripped:
            reason = "instruction is empty"
        elif len(stripped) > self.max_instruction_chars:
            reason = f"instruction has {len(stripped)} characters, at most {self.max_instruction_chars} are allowed"
        with self._lock:
            if self._instruction is not None and 0 < sent_ns < self._instruction.stamp_ns:
                return None
            self._instruction = _Sample(None if reason else stripped, reason, sent_ns, recv_ns)
            if reason:
                self._counters["rejected_instruction"] += 1
        return reason

    def restart(self, before_ns: int, after_ns: int) -> int:
        """The clock jumped from ``before_ns`` to ``after_ns``: drop the images and joint states received before
        (the instruction stays). Returns how many inputs were dropped."""
        placeholder = _Sample(None, None, 0, 0)
        with self._lock:
            self._jump = (before_ns, after_ns)
            self._restarts += 1
            self._unsettled = {*range(len(self.cameras)), *(f"state{i}" for i in range(len(self._states)))}
            dropped = sum(s is not None and not s.dropped_at_jump for s in (*self._images, *self._states))
            self._images = [placeholder if s is not None else None for s in self._images]
            self._states = [placeholder if s is not None else None for s in self._states]
        return dropped

    def _from_other_timeline(self, key: int | str, stamp_ns: int, recv_ns: int, timeline: int | None) -> bool:
        """A message of the timeline before the latest jump that arrives after it (counted, dropped). The input's
        first message of the new timeline settles it: from then on its messages are taken as they come."""
        with self._lock:
            if key not in self._unsettled or stamp_ns <= 0:  # no jump yet, or this input is on the new timeline
                return False
            assert self._jump is not None  # restart set both
            before, after = self._jump
            # The clock at arrival; a receive time read before the jump was handled may be of either timeline:
            # then the jump's own instant stands for it (the message arrived around the jump).
            now = recv_ns if recv_ns > 0 and timeline in (None, self._restarts) else after
            unjumped = now - (after - before)  # what the clock would read now had it not jumped
            if abs(stamp_ns - now) <= abs(stamp_ns - unjumped):
                self._unsettled.discard(key)
                return False
            self._counters["dropped_after_clock_jump"] += 1
            return True

    def instruction(self) -> str | None:
        """The instruction in use (None: none arrived, or the latest was refused)."""
        with self._lock:
            return None if self._instruction is None else self._instruction.value  # type: ignore[return-value]

    # -------------------------------------------------------------------------------- the tick
    def snapshot(self, now_ns: int, max_age_ns: int, default_instruction: str = "") -> Observation:
        """The observation for a tick, or ObservationError (counted as "skipped_<kind>")."""
        with self._lock:
            try:
                return self._snapshot(now_ns, max_age_ns, default_instruction)
            except ObservationError as exc:
                self._counters[f"skipped_{exc.kind}"] += 1
                raise

    def _snapshot(self, now_ns: int, max_age_ns: int, default_instruction: str) -> Observation:
        images: list[np.ndarray | None] = []
        masked: list[int] = []
        stamp_ns, frame_id = None, ""
        for slot, topic in enumerate(self.cameras):
            if not topic:
                images.append(None)
                continue
            image, kind, reason = self._camera(slot, now_ns, max_age_ns)
            if image is None:
                if not self.optional[slot]:
                    raise ObservationError(kind, reason)
                if kind != AFTER_CLOCK_JUMP:  # not yet sent again since the jump: no camera problem
                    self._counters["masked_slot"] += 1
                masked.append(slot)
            elif stamp_ns is None:
                sample = self._images[slot]
                assert sample is not None
                stamp_ns, frame_id = sample.stamp_ns, sample.frame_id
            images.append(image)
        if stamp_ns is None:
            if any(s is not None and s.dropped_at_jump for s in self._images):
                raise ObservationError(AFTER_CLOCK_JUMP, "no camera image since the clock jumped")
            raise ObservationError("no_camera", "no usable camera image in any slot")
        state = self._joint_state(now_ns, max_age_ns)
        instruction = self._current_instruction(default_instruction)
        return Observation(images, state, instruction, stamp_ns, frame_id, masked)

    def _camera(self, slot: int, now_ns: int, max_age_ns: int) -> tuple[np.ndarray | None, str, str]:
        sample = self._images[slot]
        where = f"camera slot {slot} ({self.cameras[slot]})"
        if sample is None:
            return None, "missing_image", f"{where}: no image received yet"
        if sample.dropped_at_jump:
            return None, AFTER_CLOCK_JUMP, f"{where}: no image since the clock jumped"
        if sample.error is not None:
            return None, "rejected_image", sample.error
        age = sample.age_ns(now_ns)
        if age > max_age_ns:
            return None, "stale_image", f"{where}: latest image is {age / 1e9:.3f} s away from now (max {max_age_ns / 1e9:.3f} s)"
        return sample.value, "", ""  # type: ignore[return-value]

    def _joint_state(self, now_ns: int, max_age_ns: int) -> np.ndarray | None:
        if not self.use_state:
            return None
        values = []
        for source, sample in enumerate(self._states):
            where = self._source_name(source)
            if sample is None:
                raise ObservationError("missing_joint_state", f"no joint state{where} received yet")
            if sample.dropped_at_jump:
                raise ObservationError(AFTER_CLOCK_JUMP, f"no joint state{where} since the clock jumped")
            if sample.error is not None:
                raise ObservationError("rejected_joint_state", sample.error)
            age = sample.age_ns(now_ns)
            if age > max_age_ns:
                raise ObservationError("stale_joint_state", f"latest joint state{where} is {age / 1e9:.3f} s away from now "
                                                            f"(max {max_age_ns / 1e9:.3f} s)")  # fmt: skip
            values.append(sample.value)
        return self._assembled(values)  # type: ignore[arg-type]

    def _assembled(self, values: list[np.ndarray]) -> np.ndarray:
        """The whole state from each source's positions."""
        if len(values) == 1:
            return values[0]
        out = np.empty(sum(len(idx) for _, idx in self.state_parts))
        for (_, idx), value in zip(self.state_parts, values):
            out[list(idx)] = value
        return out

    def _current_instruction(self, default_instruction: str) -> str:
        sample = self._instruction
        if sample is None:
            if not default_instruction.strip():
                raise ObservationError("missing_instruction", "no instruction received and default_instruction is empty")
            return default_instruction.strip()
        if sample.error is not None:
            raise ObservationError("rejected_instruction", sample.error)
        return str(sample.value)

    @property
    def state_names(self) -> list[str]:
        """The joint-state inputs as ages_s and the topic statistics name them."""
        return [f"joint_states {t}" for t, _ in self.state_parts] if len(self.state_parts) > 1 else ["joint_states"]

    def ages_s(self, now_ns: int) -> dict[str, float | None]:
        """Age in seconds (now minus the stamp, or the receive time for a zero stamp) of the latest message of
        each camera topic and of the joint states ("joint_states"); None when nothing arrived yet."""
        with self._lock:
            samples = {topic: self._images[slot] for slot, topic in enumerate(self.cameras) if topic}
            if self.use_state:
                samples.update(zip(self.state_names, self._states))
        return {topic: None if s is None or s.dropped_at_jump else (now_ns - (s.stamp_ns or s.recv_ns)) / 1e9
                for topic, s in samples.items()}

    # ----------------------------------------------------------------------------- counters
    def count(self, kind: str, n: int = 1) -> None:
        """Add to a counter from outside (e.g. "skipped_invalid_input" when the runtime refuses a frame)."""
        with self._lock:
            self._counters[kind] += n

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)
