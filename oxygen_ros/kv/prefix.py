"""One frame's observation prefix, prefilled once and shared by reference."""

from __future__ import annotations

from dataclasses import dataclass

from oxygen_ros.kv.pool import Extent


@dataclass(eq=False)
class SharedPrefix:
    """The KV of one frame's prefix (images + prompt), stored once in the pool.

    The action path and every text request forked from this frame each hold one reference
    (``refcount``); the :class:`~oxygen_ros.kv.manager.KVCacheManager` frees the slots when the last
    reference is released. ``shareable`` is False when the prefix lives in the manager's reserved
    action scratch area, which text requests must not pin.
    """

    id: int
    frame_seq: int
    stamp_ns: int
    extent: Extent
    length: int
    refcount: int = 1
    shareable: bool = True

    @property
    def alive(self) -> bool:
        return self.refcount > 0
