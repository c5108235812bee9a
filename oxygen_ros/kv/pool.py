"""Token-slot arena for the keys and values of every layer.

One pair of tensors ``k``/``v`` of shape ``[num_layers, capacity_tokens, num_kv_heads, head_dim]`` is
allocated at construction and never reallocated; callers receive contiguous runs of token slots
(:class:`Extent`) from a first-fit free list whose neighbouring ranges coalesce on free.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Extent:
    """A contiguous run of token slots ``[start, start + length)`` in a :class:`KVPool`."""

    start: int
    length: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.length < 0:
            raise ValueError(f"Extent: start and length must be >= 0, got start={self.start} length={self.length}")

    @property
    def stop(self) -> int:
        return self.start + self.length

    def slots(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The slot indices of this extent as a LongTensor on ``device``."""
        return torch.arange(self.start, self.stop, dtype=torch.long, device=device)


class KVPool:
    """Fixed arena of KV token slots with a first-fit free list of ranges."""

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        capacity_tokens: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads),
                            ("head_dim", head_dim), ("capacity_tokens", capacity_tokens)):
            if value <= 0:
                raise ValueError(f"KVPool: {name} must be > 0, got {value}")
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.capacity_tokens = capacity_tokens
        shape = (num_layers, capacity_tokens, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self._free: list[tuple[int, int]] = [(0, capacity_tokens)]  # (start, length), sorted by start
        self._allocated: dict[int, int] = {}  # start -> length of each live extent
        self.used_tokens = 0
        self.peak_used_tokens = 0  # the most slots in use at once since `restart_peak`

    @staticmethod
    def token_bytes(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        """Bytes of K plus V for one token across all layers."""
        return 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()

    @classmethod
    def from_budget_bytes(
        cls,
        budget_bytes: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> "KVPool":
        """The largest pool whose K/V storage fits in ``budget_bytes``."""
        per_token = cls.token_bytes(num_layers, num_kv_heads, head_dim, dtype)
        capacity = budget_bytes // per_token
        if capacity <= 0:
            raise ValueError(f"KVPool.from_budget_bytes: budget {budget_bytes} B is below one token ({per_token} B)")
        return cls(num_layers, num_kv_heads, head_dim, capacity, dtype, device)

    # -- sizes ------------------------------------------------------------------------------------
    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.k.element_size()

    @property
    def capacity_bytes(self) -> int:
        return self.capacity_tokens * self.bytes_per_token

    @property
    def used_bytes(self) -> int:
        return self.used_tokens * self.bytes_per_token

    @property
    def free_tokens(self) -> int:
        return self.capacity_tokens - self.used_tokens

    @property
    def largest_free_run(self) -> int:
        return max((length for _, length in self._free), default=0)

    # -- allocation -------------------------------------------------------------------------------
    def allocate(self, n_tokens: int) -> Extent | None:
        """A contiguous run of ``n_tokens`` slots (first fit), or None when no free run is long enough."""
        if n_tokens <= 0:
            raise ValueError(f"KVPool.allocate: n_tokens must be > 0, got {n_tokens}")
        for i, (start, length) in enumerate(self._free):
            if length >= n_tokens:
                if length == n_tokens:
                    del self._free[i]
                else:
                    self._free[i] = (start + n_tokens, length - n_tokens)
                self._allocated[start] = n_tokens
                self.used_tokens += n_tokens
                self.peak_used_tokens = max(self.peak_used_tokens, self.used_tokens)
                return Extent(start, n_tokens)
        return None

    def restart_peak(self) -> None:
        """Measure the peak from now on (it starts at what is in use now)."""
        self.peak_used_tokens = self.used_tokens

    def free(self, extent: Extent) -> None:
        """Return ``extent`` to the free list, merging it with adjacent free ranges."""
        if self._allocated.get(extent.start) != extent.length:
            raise ValueError(f"KVPool.free: {extent} is not a live allocation (double free or foreign extent)")
        del self._allocated[extent.start]
        self.used_tokens -= extent.length
        start, length = extent.start, extent.length
        i = bisect.bisect_left(self._free, (start, 0))
        if i < len(self._free) and start + length == self._free[i][0]:  # merge the right neighbour
            length += self._free[i][1]
            del self._free[i]
        if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == start:  # merge the left neighbour
            start, length = self._free[i - 1][0], self._free[i - 1][1] + length
            i -= 1
            del self._free[i]
        self._free.insert(i, (start, length))

    # -- views ------------------------------------------------------------------------------------
    def _check(self, extent: Extent) -> None:
        if extent.stop > self.capacity_tokens:
            raise ValueError(f"KVPool: {extent} exceeds the capacity of {self.capacity_tokens} tokens")

    def view_k(self, extent: Extent) -> torch.Tensor:
        """Zero-copy view ``[L, length, Hkv, D]`` of the keys of ``extent``."""
        self._check(extent)
        return self.k[:, extent.start:extent.stop]

    def view_v(self, extent: Extent) -> torch.Tensor:
        """Zero-copy view ``[L, length, Hkv, D]`` of the values of ``extent``."""
        self._check(extent)
        return self.v[:, extent.start:extent.stop]
