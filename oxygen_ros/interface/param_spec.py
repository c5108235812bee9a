"""One declared parameter: its name, type, default, description and the checks of a value.

Plain data, no rclpy: the node's rclpy glue (`oxygen_ros.ros.node_params`) turns a spec into a ROS
parameter descriptor; the offline tools validate parameter files with the same specs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from .topic_names import topic_name_problem

__all__ = ["ConfigError", "ParamSpec", "check_device", "check_topic"]

DEVICE_PATTERN = re.compile(r"^(cpu|cuda(:\d+)?)$")


class ConfigError(ValueError):
    """The node's parameters are inconsistent or out of range; the message lists every problem."""


@dataclass(frozen=True)
class ParamSpec:
    """One declared parameter. `low`/`high` bound a number (or each element of a number list)."""

    name: str
    kind: str  # "str", "int", "float" (accepts ints), "bool"; a "[]" suffix makes it a list
    default: Any
    description: str
    read_only: bool = True
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is not allowed (e.g. a rate must be > 0)
    check: Callable[[Any], str | None] | None = None  # extra per-value check returning a reason

    def validate(self, value: Any) -> str | None:
        """None if `value` is acceptable for this parameter, else the reason it is not."""
        base, is_list = self.kind.removesuffix("[]"), self.kind.endswith("[]")
        items = value if is_list else [value]
        if is_list and not isinstance(value, (list, tuple)):
            return f"{self.name} must be a list of {base}, got {type(value).__name__}"
        for item in items:
            reason = _check_type(base, item)
            if reason:
                return f"{self.name}: {reason}"
            if self.choices and item not in self.choices:
                return f"{self.name} must be one of {list(self.choices)}, got {item!r}"
            if base in ("int", "float"):
                reason = self._check_range(item)
                if reason:
                    return f"{self.name} {reason}"
        if self.check is not None:
            return self.check(value)
        return None

    def _check_range(self, x: float) -> str | None:
        if isinstance(x, float) and not math.isfinite(x):
            return f"must be finite, got {x}"
        if self.low is not None and (x < self.low or (self.low_open and x == self.low)):
            return f"must be {'>' if self.low_open else '>='} {self.low}, got {x}"
        if self.high is not None and x > self.high:
            return f"must be <= {self.high}, got {x}"
        return None


def _check_type(base: str, item: Any) -> str | None:
    ok = {
        "str": isinstance(item, str),
        "bool": isinstance(item, bool),
        "int": isinstance(item, int) and not isinstance(item, bool),
        "float": isinstance(item, (int, float)) and not isinstance(item, bool),
    }[base]
    return None if ok else f"expected {base}, got {item!r} ({type(item).__name__})"


def check_device(value: str) -> str | None:
    return None if DEVICE_PATTERN.match(value) else f"device must be 'cpu', 'cuda' or 'cuda:N', got {value!r}"


def check_topic(name: str, allow_empty: bool = False) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        for topic in value if isinstance(value, (list, tuple)) else [value]:
            if allow_empty and topic == "":
                continue
            reason = topic_name_problem(topic)
            if reason:
                return f"{name}: {topic!r} is not a valid topic name ({reason})"
        return None

    return check
