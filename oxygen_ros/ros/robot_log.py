"""The log lines about one robot the policy node serves, kept apart from every other robot's.

- `warn`: a warning throttled per problem of THIS robot: a repeating problem logs every WARN_THROTTLE_S, a new
  one at once. rclpy throttles per logger object and call site, so each problem (the kind plus the message with
  its numbers removed) gets its own child logger object named after the kind, per robot.
- `waiting`: at start-up, inputs that have not arrived yet are expected: one info line per robot and activation.
- `inputs_lost` / `inputs_back`: a robot whose inputs stopped (a robot switched off, a simulator that finished)
  gets one warning, not one per tick, and one info line when they are back.
"""

from __future__ import annotations

import re
import time
from typing import Any

__all__ = ["RobotLog", "WARN_THROTTLE_S"]

WARN_THROTTLE_S = 2.0
_DIGITS = re.compile(r"[0-9.]+")
_MAX_THROTTLE_KEYS = 256  # past this many distinct problems, one throttle per kind


class RobotLog:
    def __init__(self, logger: Any, robot: str) -> None:
        self._logger = logger  # the node's logger
        self.label = f"robot {robot}: " if robot else ""  # put before every line ("" for the node's only robot)
        self._throttled: dict[tuple[str, str], Any] = {}
        self._waiting_said = False
        self._lost_since: float | None = None  # time.monotonic() when the inputs were lost; None = not lost

    def reset(self) -> None:
        """A new activation: its start-up line may be said again; nothing is lost yet."""
        self._waiting_said = False
        self._lost_since = None

    def warn(self, kind: str, message: str) -> None:
        key = (kind, _DIGITS.sub("#", message)) if len(self._throttled) < _MAX_THROTTLE_KEYS else (kind, "")
        logger = self._throttled.get(key)
        if logger is None:
            logger = self._throttled[key] = self._logger.get_child(kind)
        logger.warning(self.label + message, throttle_duration_sec=WARN_THROTTLE_S)

    def info(self, message: str) -> None:
        self._logger.info(self.label + message)

    def warning(self, message: str) -> None:
        """A warning said once for its event (not throttled: the caller says it once)."""
        self._logger.warning(self.label + message)

    def waiting(self, message: str) -> None:
        if not self._waiting_said:
            self._waiting_said = True
            self.info(f"waiting for the first inputs ({message})")

    @property
    def lost(self) -> bool:
        return self._lost_since is not None

    def inputs_lost(self, message: str) -> None:
        if self._lost_since is None:
            self._lost_since = time.monotonic()
            self._logger.warning(f"{self.label}inputs lost, no action chunks until they are back: {message}")

    def inputs_back(self) -> None:
        if self._lost_since is not None:
            self.info(f"inputs are back after {time.monotonic() - self._lost_since:.1f} s: action chunks resume")
            self._lost_since = None
