"""How many frames one batched prefill call takes on a CPU: as many as keep its activations in the last-level cache.

Measured (bench preset, bfloat16, compiled batched prefill, two one-thread lanes, a 2-core AMD EPYC with a 32 MiB
L3, 2026-12-05): eight robots' frames took 904 ms as two calls of four frames (one per lane), 815 ms as four
calls of two and 837 ms as eight calls of one. Four 525-token frames hold 2100 rows of the gated MLP's two
2048-wide bfloat16 activations, 17 MiB per call and 34 MiB for the two lanes together: more than the L3. Two
frames a call fit. A GPU has no such limit, and a batch there is one call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from oxygen_ros.cpu_caches import last_level_cache_bytes
from oxygen_ros.model.config import ModelConfig


def cpu_prefill_rows(config: ModelConfig, dtype: torch.dtype, parallel_calls: int,
                     cache_bytes: int | None = None) -> int | None:
    """The most prefix rows one call may take so that ``parallel_calls`` calls' widest activations (the gated MLP's
    gate and up projections) fit the last-level cache together; None where the cache size is unknown."""
    cache = last_level_cache_bytes() if cache_bytes is None else cache_bytes
    if not cache:
        return None
    row_bytes = 2 * config.backbone.mlp_dim * torch.empty((), dtype=dtype).element_size()
    return max(1, cache // (max(1, parallel_calls) * row_bytes))


def cache_sized_groups(names: Sequence[str], rows: Mapping[str, int], max_rows: int | None) -> list[list[str]]:
    """``names`` in order, split into the fewest calls of near-equal frame counts whose rows each stay within
    ``max_rows`` on average (a single frame larger than that is a call of its own)."""
    names = list(names)
    total = sum(rows[n] for n in names)
    if max_rows is None or len(names) < 2 or total <= max_rows:
        return [names] if names else []
    calls = min(len(names), math.ceil(total / max_rows))
    size, extra = divmod(len(names), calls)
    groups, start = [], 0
    for i in range(calls):
        end = start + size + (1 if i < extra else 0)
        groups.append(names[start:end])
        start = end
    return groups
