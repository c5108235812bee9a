"""A CPU engine's batched prefill goes in calls whose activations fit the last-level cache: the split, a frame's
size and the budget from the cache, and each robot's KV still equal to its own prefill when the frames are split."""

from __future__ import annotations

import pytest
import torch

from engine_fixtures import model_with_norms
from oxygen_ros.engine.cpu_caches import last_level_cache_bytes, size_bytes
from oxygen_ros.engine.prefill_groups import cache_sized_groups, cpu_prefill_budget, prefill_frame_bytes
from oxygen_ros.model.network.config import preset
from test_fleet_prefill import CAMERA_SETS, alone_kv, fleet, frames_of


def test_groups_are_the_fewest_near_equal_calls_within_the_budget() -> None:
    sizes = {n: 525 for n in "abcdefgh"}
    assert cache_sized_groups("abcd", sizes, 2048) == [["a", "b"], ["c", "d"]]  # 2100: two calls of two
    assert cache_sized_groups("abc", sizes, 2048) == [["a", "b", "c"]]  # 1575 fit one call
    assert cache_sized_groups("abcdefgh", sizes, 1100) == [["a", "b"], ["c", "d"], ["e", "f"], ["g", "h"]]
    assert cache_sized_groups("abcde", sizes, 1100) == [["a", "b"], ["c", "d"], ["e"]]
    assert cache_sized_groups("abc", sizes, 100) == [["a"], ["b"], ["c"]]  # a frame above the budget goes alone
    assert cache_sized_groups("abcd", sizes, None) == [["a", "b", "c", "d"]]  # no cache size known: one call
    assert cache_sized_groups([], sizes, 10) == []


def test_a_frames_size_is_its_wider_of_the_mlp_and_the_attention() -> None:
    bench, pi05 = preset("bench"), preset("pi05")
    # bench: 8 heads; the attention's scores, exponentials (float32) and bfloat16 probabilities outgrow the
    # 2048-wide MLP's two activations (8 KiB a token) from 103 tokens on
    assert prefill_frame_bytes(bench, torch.bfloat16, 525) == 525 * 8 * 525 * 10  # 22 MB: alone in a call
    assert prefill_frame_bytes(bench, torch.bfloat16, 64) == 64 * 2 * 2048 * 2
    assert prefill_frame_bytes(bench, torch.float32, 525) == 525 * 8 * 525 * 12
    assert prefill_frame_bytes(pi05, torch.bfloat16, 300) == 300 * 2 * 16384 * 2  # the 16384-wide MLP
    two_lanes = cpu_prefill_budget(2, cache_bytes=32 << 20)
    assert two_lanes == 16 << 20 and cpu_prefill_budget(1, cache_bytes=32 << 20) == 32 << 20
    frames = {n: prefill_frame_bytes(bench, torch.bfloat16, 525) for n in "abcd"}
    assert cache_sized_groups("abcd", frames, two_lanes) == [["a"], ["b"], ["c"], ["d"]]
    small = {n: prefill_frame_bytes(bench, torch.bfloat16, 200) for n in "abcd"}  # 3.2 MB each
    assert cache_sized_groups("abcd", small, two_lanes) == [["a", "b", "c", "d"]]
    assert size_bytes("32768K") == 32 << 20 and size_bytes("1M") == 1 << 20 and size_bytes("512") == 512
    cache = last_level_cache_bytes()
    assert cpu_prefill_budget(2) == (None if cache is None else cache // 2)


@pytest.mark.parametrize("mode", ["causal_text", "bidirectional"])
def test_frames_split_into_calls_equal_each_robots_own_prefill(mode: str) -> None:
    model = model_with_norms(mode, seed=13)
    engine = fleet(model)
    assert engine.prefill_cache_budget == cpu_prefill_budget(1)  # a CPU engine without lanes
    frames = frames_of(model, CAMERA_SETS["ragged"])
    shortest = min(alone_kv(model, f)[0].shape[1] for f in frames.values())
    engine.prefill_cache_budget = prefill_frame_bytes(model.config, model.dtype, shortest)  # a call for each frame
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
