"""What one request may expand to when decoded: msgpack lengths, nesting depth and the total object count.

A msgpack frame is compact where Python objects are not: one byte is an empty map (64 bytes and a hook call
once decoded), so a 15 MiB array of empty maps becomes about a gigabyte and a minute of work. msgpack's own
limits refuse an array, map, string or extension whose declared length is over a bound before allocating it;
the object budget (spent by the decode hooks as each map and array completes) bounds the total, so a frame
never grows past a few megabytes of Python objects whatever its bytes say; the depth is checked on the
decoded (already bounded) result. openpi's observations sit far below every bound: an ALOHA request is a map
of three keys, a camera map of four, four-key array markers and shape lists of at most 8 sizes (about 60
objects, depth 4); images travel as one msgpack bin each, bounded by the frame size alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["FrameBounds", "FrameRefused", "ObjectBudget", "check_depth", "refusal_for_limit"]


class FrameRefused(ValueError):
    """A request that would expand past the server's bounds when decoded (refused before it does)."""


@dataclass(frozen=True)
class FrameBounds:
    max_map_len: int = 256  # entries of one map (an observation has a few dozen keys at most)
    max_array_len: int = 1024  # items of one msgpack array (array shapes hold at most 8)
    max_str_len: int = 64 * 1024  # bytes of one string (a prompt is at most 2000 characters)
    max_objects: int = 16 * 1024  # map entries + array items + containers of the whole request
    max_depth: int = 16  # maps and arrays inside each other (an ALOHA request nests 4 deep)

    def unpacker_limits(self) -> dict[str, int]:
        """msgpack's own length limits (checked when a length is read, before anything is allocated)."""
        return {"max_map_len": self.max_map_len, "max_array_len": self.max_array_len,
                "max_str_len": self.max_str_len, "max_ext_len": 0}  # fmt: skip  (openpi's encoding uses no ext)


class ObjectBudget:
    """The objects a request may still decode to; each completed map or array spends its size."""

    def __init__(self, bounds: FrameBounds) -> None:
        self.max_objects = bounds.max_objects
        self.left = bounds.max_objects

    def spend(self, container: dict | list) -> None:
        self.left -= len(container) + 1
        if self.left < 0:
            raise FrameRefused(f"the request holds more than {self.max_objects} map entries and array items; "
                               "an openpi observation holds about a hundred")  # fmt: skip


def check_depth(obj: Any, max_depth: int) -> None:
    """Raise :class:`FrameRefused` where maps and arrays nest deeper than ``max_depth``."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = list(value.values())
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > max_depth:
            raise FrameRefused(f"the request nests maps and arrays deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children)


_LIMIT = re.compile(r"(\d+) exceeds max_(\w+)_len\((\d+)\)")
_WHAT = {"array": "an array of {n} items", "map": "a map of {n} entries", "str": "a string of {n} bytes",
         "bin": "a bin of {n} bytes"}  # fmt: skip


def refusal_for_limit(exc: ValueError) -> FrameRefused | None:
    """msgpack's 'N exceeds max_array_len(M)' as a refusal naming what was declared; None for other errors."""
    match = _LIMIT.search(str(exc))
    if match is None:
        return None
    n, kind, limit = match.groups()
    if kind == "ext":
        return FrameRefused("the request holds a msgpack extension type; openpi's encoding uses none")
    what = _WHAT.get(kind, kind + " of {n}").format(n=n)
    return FrameRefused(f"the request declares {what}; this server accepts at most {limit}")
