"""ReqToTokenPool with the reference's Req-object surface over kvpool's request table."""

from types import SimpleNamespace

import pytest
import torch

from kvpool.sglang import ReqToTokenPool
from support import rng_for


def req():
    return SimpleNamespace(req_pool_idx=None, inflight_middle_chunks=0, kv_committed_len=0)


def test_slots_come_out_in_the_reference_order(device):
    pool = ReqToTokenPool(size=4, max_context_len=16, device=device, enable_memory_saver=False)
    assert pool.req_to_token.shape == (5, 16) and pool.req_to_token.dtype == torch.int64
    assert (pool.req_to_token == 0).all()
    reqs = [req() for _ in range(3)]
    assert pool.alloc(reqs) == [1, 2, 3]
    assert pool.available_size() == 1
    assert pool.alloc([req(), req()]) is None  # one slot left: no allocation, nothing changed
    assert pool.available_size() == 1
    pool.free(reqs[0])
    assert reqs[0].req_pool_idx is None
    other = req()
    assert pool.alloc([other]) == [4] and pool.alloc([req()]) == [1]  # freed slots go to the back
    assert int(pool.req_generation[1]) == 2 and int(pool.req_generation[4]) == 1
    with pytest.raises(AssertionError):
        pool.free(reqs[0])  # no slot any more
    pool.check_invariants()


def test_chunked_request_keeps_its_slot(device):
    pool = ReqToTokenPool(size=2, max_context_len=8, device=device)
    r = req()
    pool.alloc([r])
    with pytest.raises(AssertionError):
        pool.alloc([r])  # reusing a slot needs a chunked request or committed KV
    r.inflight_middle_chunks = 1
    assert pool.alloc([r, req()]) == [1, 2]


def test_writes_land_in_the_live_table(device, seed):
    rng = rng_for(seed)
    pool = ReqToTokenPool(size=6, max_context_len=32, device=device)
    rows = {}
    held = []
    for _ in range(60):
        if held and rng.random() < 0.3:
            r = held.pop(rng.randrange(len(held)))
            pool.free(r)
            rows.pop(id(r))
            continue
        r = req()
        if pool.alloc([r]) is None:
            assert len(held) == 6
            continue
        held.append(r)
        n = rng.randint(1, 32)
        values = torch.tensor([rng.randrange(1 << 20) for _ in range(n)], device=pool.device)
        pool.write((r.req_pool_idx, slice(0, n)), values)
        rows[id(r)] = (r, values.tolist())
        for r2, v in rows.values():
            assert pool.req_to_token[r2.req_pool_idx, : len(v)].tolist() == v
    pool.clear()
    assert pool.available_size() == 6 and int(pool.req_generation.sum()) == 0
    pool.check_invariants()
