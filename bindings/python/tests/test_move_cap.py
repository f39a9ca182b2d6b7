"""The pairs' per-side options through kvpool.sglang: with lazy compaction each side's
opportunistic flush moves at most that side's own cap (``full_max_moves_per_call``,
``swa_max_moves_per_call``, ``mamba_max_moves_per_call``), the same workload under the default
cap moves more in one flush, repeated capped flushes drain every hole, and the KV stamped at
allocation is found through translation after every flush."""

import pytest
import torch

from kvpool.errors import InvalidArgumentError
from kvpool.sglang import UnifiedMambaTokenToKVPoolAllocator, UnifiedSWATokenToKVPoolAllocator
from support import Stamped, check_all, mamba_pool, mamba_stores, rng_for, swa_pool, swa_stores


class Channel:
    """Allocations on one side (or on a pair, stamped on both of its sides), tracked by request."""

    def __init__(self, alloc, free, unit, stamped):
        self.alloc, self.free, self.unit, self.stamped = alloc, free, unit, stamped
        self.requests = []

    def admit(self, rng):
        """One request of 1 to 3 pages, or False when there is no room."""
        ids = self.alloc(rng.randint(1, 3) * self.unit)
        if ids is None:
            return False
        self.requests.append(ids.tolist())
        for s in self.stamped:
            s.stamp(self.requests[-1], rng)
        return True

    def free_half(self, rng):
        for toks in rng.sample(self.requests, len(self.requests) // 2):
            self.requests.remove(toks)
            self.free(torch.tensor(toks))
            for s in self.stamped:
                s.forget(toks)

    def check(self, what):
        live = [t for toks in self.requests for t in toks]
        for s in self.stamped:
            check_all(s.allocator, live, s, what)


def swa_world(device, seed, page_size, caps):
    pool = swa_pool(device, page_size)
    full_pages = pool.max_slots("full") // page_size
    swa_pages = pool.max_slots("swa") // page_size
    kv, full_store, swa_store = swa_stores(
        "unified", pool, full_pages, swa_pages, page_size, device
    )
    a = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=kv,
        device=device,
        full_max_total_num_tokens=full_pages * page_size,
        swa_max_total_num_tokens=swa_pages * page_size,
        page_size=page_size,
        lazy_compaction=True,
        full_max_moves_per_call=caps[0],
        swa_max_moves_per_call=caps[1],
    )
    sides = (a.full_attn_allocator, a.swa_attn_allocator)
    stamped = [Stamped(sides[0], full_store), Stamped(sides[1], swa_store)]
    return a, sides, [Channel(a.alloc, a.free, page_size, stamped)]


def mamba_world(device, seed, page_size, caps):
    pool = mamba_pool(device, page_size)
    kv, full_store, state_store = mamba_stores("unified", pool, page_size, device)
    a = UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=kv,
        device=device,
        page_size=page_size,
        lazy_compaction=True,
        full_max_moves_per_call=caps[0],
        mamba_max_moves_per_call=caps[1],
    )
    sides = (a.full_attn_allocator, a.mamba_allocator)
    channels = [
        Channel(s.alloc, s.free, unit, [Stamped(s, store)])
        for s, unit, store in zip(sides, (page_size, 1), (full_store, state_store))
    ]
    return a, sides, channels


def moved(sides):
    return [s.counters()["pages_moved"] for s in sides]


def churned(make, device, seed, page_size, caps):
    """A pair filled up (its sides' requests taking turns), then half of its requests freed:
    holes under live pages."""
    rng = rng_for(seed * 100 + page_size)
    a, sides, channels = make(device, seed, page_size, caps)
    while any([c.admit(rng) for c in channels]):
        pass
    for c in channels:
        c.free_half(rng)
    for c in channels:
        c.check("after the frees")
    return a, sides, channels


@pytest.mark.parametrize("make", [swa_world, mamba_world], ids=["swa", "mamba"])
@pytest.mark.parametrize("page_size", [1, 4])
def test_each_side_flushes_at_most_its_cap(device, seed, make, page_size):
    caps = (2, 3)
    a, sides, channels = churned(make, device, seed, page_size, caps)
    assert [s._lazy_max_moves_per_call for s in sides] == list(caps)

    # The same workload under the default cap: one opportunistic flush moves more than the caps.
    d, d_sides, _ = churned(make, device, seed, page_size, (None, None))
    assert [s._lazy_max_moves_per_call for s in d_sides] == [4096, 4096]
    d.flush_opportunistic()
    uncapped = moved(d_sides)
    assert all(u > c for u, c in zip(uncapped, caps)), f"too few moves to test the caps: {uncapped}"

    most = [0, 0]
    for flush in range(10_000):
        before = moved(sides)
        a.flush_opportunistic()
        step = [after - b for after, b in zip(moved(sides), before)]
        assert all(m <= c for m, c in zip(step, caps)), f"flush {flush} moved {step}, caps {caps}"
        most = [max(m, s) for m, s in zip(most, step)]
        for c in channels:
            c.check(f"after capped flush {flush}")
        if step == [0, 0]:
            break
    assert most == list(caps), f"the largest flushes moved {most}, caps {caps}"
    # Drained: an urgent (uncapped) flush finds nothing left to move.
    before = moved(sides)
    for s in sides:
        s._flush(urgent=True)
    assert moved(sides) == before
    for s in sides:
        assert s._side.state().hole_pages == 0
    for c in channels:
        c.check("after the urgent flush")


def test_a_cap_below_one_is_refused(device):
    pool = swa_pool(device, 1)
    with pytest.raises(InvalidArgumentError, match="max_moves_per_call"):
        UnifiedSWATokenToKVPoolAllocator(
            unified_buffer=pool,
            kvcache=None,
            device=device,
            full_max_total_num_tokens=64,
            swa_max_total_num_tokens=64,
            swa_max_moves_per_call=0,
        )
