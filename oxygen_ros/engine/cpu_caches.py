"""The CPU's caches as Linux reports them (sysfs): what the benchmark records and what sizes the CPU prefill's
batches."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def cpu_caches() -> list[dict]:
    """Each cache level of CPU 0: level, type, size and how many CPUs share it ([] where sysfs has none)."""
    caches = []
    for index in sorted(_CACHE_DIR.glob("index[0-9]*")):
        try:
            read = lambda name: (index / name).read_text().strip()  # noqa: E731
            shared = read("shared_cpu_list")
            caches.append({"level": int(read("level")), "type": read("type"), "size": read("size"),
                           "shared_by_cpus": _count_cpus(shared)})
        except (OSError, ValueError):
            continue
    return caches


def size_bytes(size: str) -> int:
    """sysfs's "32768K" → bytes."""
    size = size.strip()
    unit = _UNITS.get(size[-1:].upper())
    return int(size[:-1]) * unit if unit else int(size)


@lru_cache(maxsize=1)
def last_level_cache_bytes() -> int | None:
    """The size of the largest data cache (the last level, shared by the cores), or None where unknown."""
    sizes = []
    for cache in cpu_caches():
        if cache["type"] in ("Unified", "Data"):
            try:
                sizes.append(size_bytes(cache["size"]))
            except ValueError:
                continue
    return max(sizes) if sizes else None


def _count_cpus(cpu_list: str) -> int:
    total = 0
    for part in cpu_list.split(","):
        lo, _, hi = part.partition("-")
        total += int(hi or lo) - int(lo) + 1
    return total
