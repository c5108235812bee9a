"""KVCacheManager and batch plans: shared prefixes, admission policies, index plans, no leaks."""

import random

import pytest
import torch

from oxygen_ros.kv import KVCacheManager, KVPool, commit, plan_step

L, HKV, D = 3, 1, 4


def make(capacity: int, reserve: int = 10, **kw) -> KVCacheManager:
    return KVCacheManager(KVPool(L, HKV, D, capacity), reserve_tokens=reserve, **kw)


def test_prefix_refcount_release_returns_bytes():
    m = make(100)
    per_token = m.pool.bytes_per_token
    assert m.stats().used_bytes == 0 and m.stats().reserved_bytes == 10 * per_token
    p = m.new_prefix(8, frame_seq=1, stamp_ns=5)
    assert p.shareable and p.refcount == 1 and m.stats().used_bytes == 8 * per_token
    adm = m.submit("language", p, [1, 2], max_tokens=3, frame_seq=1, stamp_ns=5)
    assert adm.status == "admitted" and adm.request.prefix is p and p.refcount == 2
    assert adm.request.extent.length == 5 and m.stats().used_bytes == 13 * per_token
    m.release(p)  # the action path is done; the request still holds the prefix
    assert p.refcount == 1 and m.stats().live_prefixes == 1 and m.stats().used_bytes == 13 * per_token
    m.finish(adm.request, "eos")
    s = m.stats()
    assert s.used_bytes == 0 and s.live_prefixes == 0 and s.live_requests == 0 and s.finished_total == 1
    with pytest.raises(RuntimeError, match="not live"):
        m.release(p)


def test_finish_twice_is_safe():
    m = make(100)
    p = m.new_prefix(8, 0, 0)
    r = m.submit("memory", p, [7], 4, 0, 0).request
    m.finish(r, "max_tokens")
    m.finish(r, "cancelled")  # no-op: no double free, no second release
    assert r.finish_reason == "max_tokens" and p.refcount == 1
    assert m.stats().finished_total == 1 and m.get(r.id) is None
    with pytest.raises(ValueError, match="unknown reason"):
        m.finish(r, "bored")


def test_plan_indexes_prefix_then_own_slots():
    m = make(200, reserve=20)
    pool = m.pool
    # Every slot's K holds its own slot number (per layer offset), every V its negative.
    slot_ids = torch.arange(pool.capacity_tokens, dtype=torch.float32)
    pool.k.copy_((slot_ids[None, :, None, None] + 1000 * torch.arange(L)[:, None, None, None]).expand_as(pool.k))
    pool.v.copy_(-pool.k)
    p1 = m.new_prefix(6, 1, 0)
    a = m.submit("language", p1, [11, 12, 13], 5, 1, 0).request
    p2 = m.new_prefix(9, 2, 0)
    b = m.submit("memory", p2, [21, 22], 4, 2, 0).request

    # First step: a feeds its 3-token continuation, b its 2-token one: one row per token.
    first = plan_step([a, b])
    assert first.tokens[:, 0].tolist() == [11, 12, 13, 21, 22]
    assert first.positions[:, 0].tolist() == [6, 7, 8, 9, 10]
    assert first.write_index[:, 0].tolist() == a.extent.slots()[:3].tolist() + b.extent.slots()[:2].tolist()
    assert first.ctx_len.tolist() == [7, 8, 9, 10, 11]  # causal within each request
    assert first.last_rows.tolist() == [2, 4]
    commit([a, b])
    a.generated, b.generated = [99], [98]

    plan = plan_step([a, b])
    assert plan.tokens.tolist() == [[99], [98]]
    assert plan.positions.tolist() == [[9], [11]]
    assert plan.write_index.tolist() == [[a.extent.start + 3], [b.extent.start + 2]]
    assert plan.ctx_len.tolist() == [10, 12] and plan.ctx_index.shape == (2, 12)
    for row, r in enumerate((a, b)):
        expect = r.prefix.extent.slots().tolist() + r.extent.slots()[: r.own_len + 1].tolist()
        n = int(plan.ctx_len[row])
        assert plan.ctx_index[row, :n].tolist() == expect
        assert plan.ctx_index[row, n:].tolist() == [0] * (12 - n)  # right padding is slot 0
        for layer in range(L):  # gathering with the plan reads exactly those slots
            got = pool.k[layer][plan.ctx_index[row, :n]][:, 0, 0]
            assert got.tolist() == [s + 1000 * layer for s in expect]
            assert torch.equal(pool.v[layer][plan.ctx_index[row, :n]], -pool.k[layer][plan.ctx_index[row, :n]])
    commit([a, b])
    assert (a.own_len, b.own_len) == (4, 3) and a.next_position == 10 and a.context_len == 10
    with pytest.raises(ValueError, match="no unfed token"):
        plan_step([a, b])


def test_wait_policy_queues_then_starts_from_a_later_prefix():
    m = make(40, reserve=10)  # arena: 30 tokens
    p = m.new_prefix(10, 1, 0)
    first = m.submit("language", p, [1] * 4, 16, 1, 0)  # 20 tokens: arena now full
    assert first.status == "admitted"
    second = m.submit("memory", p, [2] * 3, 5, 1, 0)
    assert second.status == "waiting" and second.reason == "no_kv_memory" and second.request is None
    assert m.waiting_count == 1 and p.refcount == 2  # the waiting spec holds no prefix reference
    m.release(p)
    p2 = m.new_prefix(10, 2, 1)
    assert not p2.shareable and m.stats().scratch_in_use  # frame 1's prefix is still held by `first`
    assert m.admit_waiting(p2, 2, 1) == []
    third = m.submit("language", p2, [3], 2, 2, 1)
    assert third.status == "waiting" and third.reason == "prefix_not_shareable"
    m.finish(first.request, "eos")
    m.release(p2)
    p3 = m.new_prefix(10, 3, 2)
    assert p3.shareable
    started = m.admit_waiting(p3, 3, 2)
    assert [r.id for r in started] == [second.request_id, third.request_id]  # FIFO
    assert started[0].task == "memory" and started[0].frame_seq == 3 and started[0].prefix is p3
    assert m.waiting_count == 0 and p3.refcount == 3
    assert m.running() == started and m.get(started[1].id) is started[1] and m.get(12345) is None
    m.close()
    assert m.stats().used_bytes == 0 and m.stats().live_prefixes == 0 and m.waiting_count == 0


def test_refuse_policy_and_too_large():
    m = make(40, reserve=10, admission="refuse")
    p = m.new_prefix(10, 1, 0)
    assert m.submit("language", p, [1] * 10, 10, 1, 0).status == "admitted"
    adm = m.submit("language", p, [1], 1, 1, 0)
    assert adm.status == "refused" and adm.reason == "no_kv_memory" and m.waiting_count == 0
    big = m.submit("language", p, [1] * 5, 16, 1, 0)  # 21 + prefix 10 > arena 30: can never run
    assert big.status == "refused" and big.reason == "too_large"
    assert m.stats().refused_total == 2 and m.stats().admitted_total == 1
    m.release(p)
    q = m.new_prefix(10, 2, 0)  # arena full: the action prefix lands in the scratch
    assert m.submit("memory", q, [1], 1, 2, 0).reason == "prefix_not_shareable"
    with pytest.raises(ValueError, match="non-empty continuation"):
        m.submit("language", p, [], 3, 1, 0)


def test_queue_full_refuses_the_oldest():
    m = make(30, reserve=10, max_waiting=2)
    p = m.new_prefix(10, 1, 0)
    m.submit("language", p, [1] * 5, 5, 1, 0)  # fills the 20-token arena
    ids = [m.submit("memory", p, [1], 2, 1, 0).request_id for _ in range(2)]
    third = m.submit("memory", p, [1], 2, 1, 0)
    assert third.status == "waiting" and [d.id for d in third.dropped] == [ids[0]]
    assert m.waiting_count == 2 and m.stats().refused_total == 1
    m2 = make(30, reserve=10, max_waiting=0)
    q = m2.new_prefix(10, 1, 0)
    assert m2.submit("language", q, [1] * 5, 5, 1, 0).status == "admitted"
    assert m2.submit("memory", q, [1], 2, 1, 0).reason == "queue_full"


def test_scratch_fallback_action_always_gets_a_prefix():
    m = make(50, reserve=12)  # arena 38 tokens
    p = m.new_prefix(12, 1, 0)
    r = m.submit("language", p, [1] * 6, 20, 1, 0).request  # arena: 12 + 26 = 38, full
    m.release(p)
    q = m.new_prefix(12, 2, 0)
    assert not q.shareable and q.extent.start == 0 and m.stats().scratch_in_use
    with pytest.raises(RuntimeError, match="scratch is still held"):
        m.new_prefix(5, 3, 0)
    with pytest.raises(ValueError, match="reserve_tokens"):
        m.new_prefix(13, 3, 0)
    m.release(q)
    assert not m.stats().scratch_in_use
    q2 = m.new_prefix(12, 3, 0)
    assert not q2.shareable
    m.release(q2)
    m.finish(r, "max_tokens")
    assert m.new_prefix(12, 4, 0).shareable
    with pytest.raises(ValueError, match="does not fit"):
        make(10, reserve=11)


def test_close_releases_everything():
    m = make(200, reserve=20)
    p = m.new_prefix(15, 1, 0)
    for _ in range(3):
        m.submit("language", p, [1, 2], 8, 1, 0)
    m.submit("memory", p, [1] * 100, 60, 1, 0)  # waits
    m.close()
    s = m.stats()
    assert s.used_bytes == 0 and s.live_requests == 0 and s.live_prefixes == 0 and s.waiting == 0
    assert m.pool.used_tokens == 20  # only the permanent scratch
    assert not p.alive


def test_thousand_frames_no_leak():
    rng = random.Random(0)
    m = make(500, reserve=64, max_waiting=8)  # tight: requests wait, some are dropped
    pool = m.pool
    action_prefix = None
    finished = scratch_frames = waited = 0
    for frame in range(1000):
        if action_prefix is not None:
            m.release(action_prefix)
        action_prefix = m.new_prefix(rng.randint(20, 64), frame, frame * 100)
        scratch_frames += not action_prefix.shareable
        m.admit_waiting(action_prefix, frame, frame * 100)
        for _ in range(rng.randint(0, 3)):
            adm = m.submit(rng.choice(["language", "memory"]), action_prefix,
                           [rng.randrange(50) for _ in range(rng.randint(1, 10))], rng.randint(1, 40), frame, frame)
            waited += adm.status == "waiting"
        live = m.running()
        if live:
            plan = plan_step(live)
            assert int(plan.ctx_len[plan.last_rows].min()) >= 2
            commit(live)
        for r in live:
            done = len(r.generated) >= r.max_tokens or rng.random() < 0.05
            if done:
                m.finish(r, "max_tokens" if len(r.generated) >= r.max_tokens else "eos")
                finished += 1
            else:
                r.generated.append(rng.randrange(50))
        # Invariant: the pool holds exactly the live extents, the scratch and the arena prefixes.
        held = sum(r.extent.length for r in m.running()) + m.reserve_tokens
        prefixes = {id(q): q for q in [action_prefix] + [r.prefix for r in m.running()]}.values()
        held += sum(q.extent.length for q in prefixes if q.shareable)
        assert pool.used_tokens == held and m.stats().live_prefixes == len(prefixes)
    s = m.stats()
    assert s.admitted_total > 500 and finished == s.finished_total
    assert s.refused_total > 0 and waited > 0 and scratch_frames > 0  # every pressure path was taken
    m.release(action_prefix)
    for r in m.running():
        m.finish(r, "cancelled")
    s = m.stats()
    assert s.used_bytes == 0 and s.live_requests == 0 and s.live_prefixes == 0
    assert pool.largest_free_run == pool.capacity_tokens - m.reserve_tokens  # fully coalesced


def test_refusal_preview_says_why_without_changing_anything():
    m = make(100, reserve=10, admission="refuse")
    assert "too large" in m.refusal(85, prefix_tokens=8)  # never fits next to a prefix in the 90-token arena
    assert m.refusal(40, prefix_tokens=8) is None
    p = m.new_prefix(8, 0, 0)
    r = m.submit("a", p, [1], 59, 0, 0).request  # 60 tokens held: 22 free in the arena
    assert "no KV memory" in m.refusal(20, prefix_tokens=8)
    assert m.refusal(20, prefix_tokens=8, pending_tokens=0) == m.refusal(20, 8)
    assert m.stats().waiting == 0 and m.stats().refused_total == 0  # a preview refuses nothing
    waiting = make(100, reserve=10, admission="wait", max_waiting=1)
    q = waiting.new_prefix(8, 0, 0)
    waiting.submit("a", q, [1], 59, 0, 0)
    assert waiting.refusal(20, prefix_tokens=8) is None  # it would wait
    assert waiting.submit("b", q, [1], 22, 0, 0).status == "waiting"  # 23 tokens, 22 free
    assert "queue full" in waiting.refusal(20, prefix_tokens=8)
    m.finish(r, "eos")
    m.release(p)


def test_reserved_ids_and_cancelling_a_waiting_spec():
    m = make(100, reserve=10, admission="wait")
    rid = m.new_request_id()
    p = m.new_prefix(8, 0, 0)
    big = m.submit("a", p, [1], 70, 0, 0)
    queued = m.submit("ask", p, [1, 2], 30, 0, 0, request_id=rid)
    assert queued.status == "waiting" and queued.request_id == rid and m.waiting_ids() == [rid]
    assert big.request_id != rid
    assert m.cancel_waiting(rid).task == "ask" and m.waiting_ids() == [] and m.cancel_waiting(rid) is None
    m.close()
    assert m.stats().used_bytes == 0
