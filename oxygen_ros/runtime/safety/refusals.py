"""Chunks the guard refuses (no command at all: the outputs hold instead), named and counted.

A refusal says which output, which joints and why: ``non_finite`` (NaN or infinite values) or ``out_of_range``
(beyond a position limit by more than the margin of the joint's range). `RefusalCounter` counts every refused
chunk per (output, joint, reason), for the node's log and diagnostics and the offline tools' summaries.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hold import LimitCounter

__all__ = ["NON_FINITE", "OUT_OF_RANGE", "Refusal", "RefusalCounter"]

NON_FINITE, OUT_OF_RANGE = "non_finite", "out_of_range"


@dataclass(frozen=True)
class Refusal:
    output: str
    joints: tuple[str, ...]  # every joint at fault in the chunk
    reason: str  # NON_FINITE or OUT_OF_RANGE
    message: str  # the first joint at fault in words

    def __str__(self) -> str:
        return self.message

    def keys(self) -> list[tuple[str, str, str]]:
        return [(self.output, joint, self.reason) for joint in self.joints]


class RefusalCounter(LimitCounter):
    """Refused chunks in all, and per (output, joint, reason): a chunk counts once for each joint at fault."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks = 0
        self.last: Refusal | None = None

    def refused(self, refusals: list[Refusal]) -> None:
        if not refusals:
            return
        with self._lock:
            self.chunks += 1
            self.last = refusals[0]
            for refusal in refusals:
                self.counts.update(refusal.keys())
                self._new.update(refusal.keys())

    def summary(self) -> dict[str, object]:
        """For a JSON summary: refused chunks, counts by ``output/joint/reason``, the last refusal in words."""
        with self._lock:
            return {"chunks": self.chunks,
                    "by_joint": {f"{o}/{j}/{r}": n for (o, j, r), n in sorted(self.counts.items())},
                    "last": "" if self.last is None else self.last.message}  # fmt: skip

    def line(self) -> str:
        """One line: "21 chunks refused (left_arm/panda_joint4 out_of_range x21)", or "" when none was."""
        return summary_line(self.summary())


def summary_line(summary: dict[str, object] | None) -> str:
    """The one line of a summary's ``refusals`` entry (as `RefusalCounter.line`), "" when none was refused."""
    if not summary or not summary.get("chunks"):
        return ""
    by_joint = summary.get("by_joint") or {}
    parts = ", ".join(f"{'/'.join(k.split('/')[:-1])} {k.split('/')[-1]} x{n}" for k, n in by_joint.items())  # type: ignore[union-attr]
    return f"{summary['chunks']} chunks refused ({parts})"
