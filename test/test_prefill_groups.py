"""A CPU engine's batched prefill goes in calls whose activations fit the last-level cache: the split, its size
from the cache, and each robot's KV still equal to its own prefill when the frames are split."""

from __future__ import annotations

import pytest
import torch

from engine_fixtures import model_with_norms
from oxygen_ros.cpu_caches import last_level_cache_bytes, size_bytes
from oxygen_ros.engine.prefill_groups import cache_sized_groups, cpu_prefill_rows
from oxygen_ros.model.config import preset
from test_fleet_prefill import CAMERA_SETS, alone_kv, fleet, frames_of


def test_groups_are_the_fewest_near_equal_calls_within_the_rows() -> None:
    rows = {n: 525 for n in "abcdefgh"}
    assert cache_sized_groups("abcd", rows, 2048) == [["a", "b"], ["c", "d"]]  # 2100 rows: two calls of two
    assert cache_sized_groups("abc", rows, 2048) == [["a", "b", "c"]]  # 1575 rows fit one call
    assert cache_sized_groups("abcdefgh", rows, 1100) == [["a", "b"], ["c", "d"], ["e", "f"], ["g", "h"]]
    assert cache_sized_groups("abcde", rows, 1100) == [["a", "b"], ["c", "d"], ["e"]]
    assert cache_sized_groups("abc", rows, 100) == [["a"], ["b"], ["c"]]  # a frame above the limit goes alone
    assert cache_sized_groups("abcd", rows, None) == [["a", "b", "c", "d"]]  # no cache size known: one call
    assert cache_sized_groups([], rows, 10) == []


def test_rows_per_call_follow_the_cache_the_width_the_dtype_and_the_parallel_calls() -> None:
    bench = preset("bench")  # gated MLP 2048 wide: two bfloat16 activations are 8 KiB a row
    assert cpu_prefill_rows(bench, torch.bfloat16, 2, cache_bytes=32 << 20) == 2048
    assert cpu_prefill_rows(bench, torch.bfloat16, 1, cache_bytes=32 << 20) == 4096
    assert cpu_prefill_rows(bench, torch.float32, 2, cache_bytes=32 << 20) == 1024
    assert cpu_prefill_rows(preset("pi05"), torch.bfloat16, 2, cache_bytes=32 << 20) == 256  # 16384 wide
    assert size_bytes("32768K") == 32 << 20 and size_bytes("1M") == 1 << 20 and size_bytes("512") == 512
    cache = last_level_cache_bytes()
    assert cpu_prefill_rows(bench, torch.bfloat16, 2) == (None if cache is None else cache // (2 * 8192))


@pytest.mark.parametrize("mode", ["causal_text", "bidirectional"])
def test_frames_split_into_calls_equal_each_robots_own_prefill(mode: str) -> None:
    model = model_with_norms(mode, seed=13)
    engine = fleet(model)
    assert engine.prefill_max_rows == cpu_prefill_rows(model.config, model.dtype, 1)  # a CPU engine without lanes
    frames = frames_of(model, CAMERA_SETS["ragged"])
    shortest = min(alone_kv(model, f)[0].shape[1] for f in frames.values())
    engine.prefill_max_rows = shortest  # every frame in a call of its own
    prefixes, _ = engine.prefill_many(frames)
    try:
        pool = engine.kv.pool
        for name, frame in frames.items():
            k, v, _ = alone_kv(model, frame)
            torch.testing.assert_close(pool.view_k(prefixes[name].extent), k, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(pool.view_v(prefixes[name].extent), v, rtol=1e-5, atol=1e-5)
    finally:
        for prefix in prefixes.values():
            engine.kv.release(prefix)
    assert engine.kv.stats().used_bytes == 0
