"""How long this process has been running: the start-up figure a robot waits through before its first chunk
(imports, model loading, compiling or loading compiled code from the cache, the first tick)."""

from __future__ import annotations

import os
from pathlib import Path


def process_age_s() -> float | None:
    """Seconds since this process started, from Linux's /proc (its start time in clock ticks after boot against
    the system's uptime); None where /proc is not there."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    start_ticks = int(fields[19])  # field 22 of proc(5), counted after the ")" that ends the command name
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
