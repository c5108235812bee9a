"""Keep glibc from mapping and unmapping large buffers on every model call.

By default glibc serves allocations above a dynamic threshold with mmap and returns them with munmap, and
trims the heap top on free. PyTorch's CPU allocator calls malloc/free for every activation, so each
prefill or decode step would map, page-fault and unmap its attention and MLP buffers again, and timings
would depend on call order. Raising both thresholds keeps freed buffers in the heap for reuse.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's ceiling on 64-bit

log = logging.getLogger(__name__)
_done = False


def keep_freed_buffers() -> bool:
    """Tune glibc malloc once per process; returns False where glibc is not available (then harmless)."""
    global _done
    if _done:
        return True
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        log.debug("mallopt not available; leaving the allocator as it is")
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)) and bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30))
    _done = ok
    return ok
