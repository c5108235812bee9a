"""How many frames one batched prefill call takes on a CPU: as many as keep its activations in the last-level cache.

A frame's widest activations are either the gated MLP's two projections (``2 · mlp_dim`` values a token) or the
attention's: float32 scores of every query head against every key, the float32 exponentials inductor keeps
beside them when the prefix length is dynamic, and the probabilities in the model's dtype (``heads · T · 10``
bytes a token in bfloat16). At the bench preset (8 heads, 525 tokens) the attention's are 22 MB a frame, more
than two lanes' share of a 32 MiB L3, so each frame is a call of its own. Measured with the compiled prefill
(bench preset, bfloat16, two one-thread lanes, a 2-core AMD EPYC with a 32 MiB L3, 2026-12-05, six rounds
interleaved): eight robots' frames took 1205 ms as two calls of four (one per lane), 916 ms as four calls of
two and 707 ms as eight calls of one; four robots' 468, 509 and 354 ms. A GPU has no such limit, and a batch
there is one call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from oxygen_ros.engine.cpu_caches import last_level_cache_bytes
from oxygen_ros.model.network.config import ModelConfig

FLOAT32_BYTES = 4


def prefill_frame_bytes(config: ModelConfig, dtype: torch.dtype, length: int) -> int:
    """The widest activations of one frame of ``length`` prefix tokens, in bytes: the gated MLP's gate and up
    projections, or the attention's float32 scores, their float32 exponentials and the probabilities."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    mlp = 2 * config.backbone.mlp_dim * itemsize
    attention = config.backbone.num_heads * length * (2 * FLOAT32_BYTES + itemsize)
    return length * max(mlp, attention)


def cpu_prefill_budget(parallel_calls: int, cache_bytes: int | None = None) -> int | None:
    """The bytes one call's activations may take so that ``parallel_calls`` calls fit the last-level cache
    together; None where the cache size is unknown."""
    cache = last_level_cache_bytes() if cache_bytes is None else cache_bytes
    return cache // max(1, parallel_calls) if cache else None


def cache_sized_groups(names: Sequence[str], sizes: Mapping[str, int], budget: int | None) -> list[list[str]]:
    """``names`` in order, split into the fewest calls of near-equal frame counts whose ``sizes`` each stay
    within ``budget`` on average (a single frame larger than that is a call of its own)."""
    names = list(names)
    total = sum(sizes[n] for n in names)
    if budget is None or len(names) < 2 or total <= budget:
        return [names] if names else []
    calls = min(len(names), math.ceil(total / budget))
    size, extra = divmod(len(names), calls)
    groups, start = [], 0
    for i in range(calls):
        end = start + size + (1 if i < extra else 0)
        groups.append(names[start:end])
        start = end
    return groups
