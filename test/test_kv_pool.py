"""KVPool: first-fit allocation, coalescing, byte accounting, zero-copy views."""

import pytest
import torch

from oxygen_ros.kv import Extent, KVPool


def make_pool(capacity: int = 100) -> KVPool:
    return KVPool(num_layers=2, num_kv_heads=1, head_dim=4, capacity_tokens=capacity)


def test_first_fit_and_coalescing():
    pool = make_pool(100)
    a, b, c = pool.allocate(10), pool.allocate(20), pool.allocate(30)
    assert (a, b, c) == (Extent(0, 10), Extent(10, 20), Extent(30, 30))
    assert pool.used_tokens == 60 and pool.free_tokens == 40 and pool.largest_free_run == 40
    pool.free(a)
    assert pool.allocate(5) == Extent(0, 5)  # first fit reuses the hole at the front
    pool.free(Extent(0, 5))
    pool.free(b)  # [0, 30) coalesces into one run
    assert pool.largest_free_run == 40
    assert pool.allocate(30) == Extent(0, 30)
    pool.free(Extent(0, 30))
    pool.free(c)  # both neighbours merge: the whole pool is one run again
    assert pool.largest_free_run == 100 and pool.used_tokens == 0
    assert pool.allocate(100) == Extent(0, 100)


def test_fragmentation_returns_none_until_neighbours_free():
    pool = make_pool(40)
    ext = [pool.allocate(10) for _ in range(4)]
    assert pool.allocate(1) is None
    pool.free(ext[0])
    pool.free(ext[2])
    assert pool.free_tokens == 20 and pool.largest_free_run == 10
    assert pool.allocate(15) is None  # 20 free tokens but no contiguous run of 15
    pool.free(ext[1])
    assert pool.allocate(30) == Extent(0, 30)


def test_double_free_and_unknown_extent_raise():
    pool = make_pool()
    e = pool.allocate(8)
    pool.free(e)
    with pytest.raises(ValueError, match="not a live allocation"):
        pool.free(e)
    e = pool.allocate(8)
    with pytest.raises(ValueError):
        pool.free(Extent(e.start, 4))  # wrong length
    with pytest.raises(ValueError):
        pool.free(Extent(50, 8))  # never allocated
    with pytest.raises(ValueError):
        pool.allocate(0)


def test_budget_bytes_math():
    per_token = 2 * 18 * 1 * 256 * 2  # K+V, Gemma-2B shape in bf16: 18 KiB
    assert KVPool.token_bytes(18, 1, 256, torch.bfloat16) == per_token == 18 * 1024
    pool = KVPool.from_budget_bytes(per_token * 10 + 5, 18, 1, 256, torch.bfloat16)
    assert pool.capacity_tokens == 10 and pool.bytes_per_token == per_token
    assert pool.capacity_bytes == 10 * per_token
    assert pool.k.numel() * pool.k.element_size() * 2 == pool.capacity_bytes
    e = pool.allocate(3)
    assert pool.used_bytes == 3 * per_token
    pool.free(e)
    assert pool.used_bytes == 0
    with pytest.raises(ValueError, match="below one token"):
        KVPool.from_budget_bytes(per_token - 1, 18, 1, 256, torch.bfloat16)


def test_views_are_zero_copy_into_stable_buffers():
    pool = make_pool(50)
    k_ptr, v_ptr = pool.k.data_ptr(), pool.v.data_ptr()
    e = pool.allocate(7)
    e = pool.allocate(5)  # starts at slot 7
    vk, vv = pool.view_k(e), pool.view_v(e)
    assert vk.shape == (2, 5, 1, 4) and vv.shape == (2, 5, 1, 4)
    vk.fill_(3.0)
    vv[1, 2] = 9.0
    assert torch.all(pool.k[:, 7:12] == 3.0) and pool.k[:, :7].abs().sum() == 0
    assert torch.all(pool.v[1, 9] == 9.0)
    end_k = k_ptr + pool.k.numel() * pool.k.element_size()
    assert k_ptr <= vk.data_ptr() < end_k
    assert vk.untyped_storage().data_ptr() == k_ptr
    assert pool.k.data_ptr() == k_ptr and pool.v.data_ptr() == v_ptr  # never reallocated
    with pytest.raises(ValueError, match="exceeds the capacity"):
        pool.view_k(Extent(45, 10))


def test_extent_slots():
    e = Extent(5, 3)
    assert e.stop == 8
    assert e.slots().tolist() == [5, 6, 7] and e.slots().dtype == torch.long
    with pytest.raises(ValueError):
        Extent(-1, 2)
