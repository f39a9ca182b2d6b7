"""The tri-pool (UnifiedMambaSWATokenToKVPoolAllocator) with a smaller page on the SWA side
(issue #30, decoupled page sizes): each full page binds ratio SWA pages, free_swa releases
the window one SWA page at a time, KV and state bytes stored for a token or slot are found
again after compaction, and a bad SWA page size is refused before anything is built."""

import pytest
import torch

from kvpool.sglang import UnifiedMambaSWATokenToKVPoolAllocator
from support import rng_for, tri_pool, unbound_pool_state
from test_mamba_swa import Request, TriWorld, step

FULL_PAGE, SWA_PAGE = 16, 4
RATIO = FULL_PAGE // SWA_PAGE


def decoupled(device, lazy=False, store_kind="unified"):
    return TriWorld(device, FULL_PAGE, lazy, store_kind, 1 << 17, swa_page_size=SWA_PAGE)


def admit(w, tokens, rng):
    """A request holding a state slot and `tokens` tokens from one plain alloc."""
    a = w.alloc
    slot = a.mamba_allocator.alloc(1).tolist()
    w.state.stamp(slot, rng)
    r = Request(slot[0])
    r.tokens = a.alloc(tokens).tolist()
    w.stamp(r.tokens, rng)
    w.running[w.next_id] = r
    w.next_id += 1
    return r


def release_window(w, r, swa_pages):
    """The request's first swa_pages SWA pages leave the window."""
    gone = r.tokens[r.swa_freed : swa_pages * SWA_PAGE]
    w.alloc.free_swa(torch.tensor(gone, device=w.device))
    r.swa_freed = swa_pages * SWA_PAGE
    w.swa.forget(gone)


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_a_full_page_binds_ratio_swa_pages(device, lazy):
    w = decoupled(device, lazy)
    a = w.alloc
    assert a.full_attn_allocator.page_size == FULL_PAGE
    assert a.swa_attn_allocator.page_size == SWA_PAGE
    assert a.mamba_allocator.page_size == 1
    r = admit(w, 3 * FULL_PAGE, rng_for(3))
    assert a.full_attn_allocator.live_page_count == 3
    assert a.swa_attn_allocator.live_page_count == 3 * RATIO
    assert a.mamba_allocator.allocated_count() == 1
    ids = torch.tensor(r.tokens, device=w.device)
    swa = a.translate_loc_from_full_to_swa(ids).to(torch.int64).cpu()
    # Each SWA page is contiguous and keeps the tokens' offsets in it.
    assert torch.equal(swa % SWA_PAGE, ids.cpu() % SWA_PAGE)
    assert len(set((swa // SWA_PAGE).tolist())) == 3 * RATIO
    # A prefill of part of a full page binds the whole full page's SWA pages.
    short = Request(a.mamba_allocator.alloc(1).item())
    prefix, seq = torch.tensor([0]), torch.tensor([6])
    out = a.alloc_extend(prefix.to(w.device), prefix, seq.to(w.device), seq, w.last_loc([short]), 6)
    short.tokens = out.tolist()
    w.stamp(short.tokens, rng_for(4))
    w.state.stamp([short.slot], rng_for(5))
    w.running[w.next_id] = short
    w.next_id += 1
    assert a.full_attn_allocator.live_page_count == 4
    assert a.swa_attn_allocator.live_page_count == 4 * RATIO
    w.check("after binding")


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_free_swa_releases_one_swa_page_at_a_time(device, lazy):
    w = decoupled(device, lazy)
    a = w.alloc
    r = admit(w, 4 * FULL_PAGE, rng_for(6))
    swa_room = a.swa_available_size()
    for k in range(1, RATIO + 2):  # past the first full page, one SWA page at a time
        release_window(w, r, k)
        assert a.swa_attn_allocator.live_page_count == 4 * RATIO - k
        assert a.swa_attn_allocator.allocated_count() == 4 * FULL_PAGE - k * SWA_PAGE
        gone = torch.tensor(r.tokens[(k - 1) * SWA_PAGE : k * SWA_PAGE], device=w.device)
        assert (a.translate_loc_from_full_to_swa(gone) == 0).all()
        w.check(f"after free_swa of SWA page {k}")
    assert a.full_attn_allocator.allocated_count() == 4 * FULL_PAGE
    assert a.mamba_allocator.allocated_count() == 1
    kept = torch.tensor(r.tokens[(RATIO + 1) * SWA_PAGE :], device=w.device)
    assert (a.translate_loc_from_full_to_swa(kept) > 0).all()
    if not lazy:  # a lazy side's released pages are holes until a flush
        assert a.swa_available_size() == swa_room + (RATIO + 1) * SWA_PAGE
    w.finish(list(w.running), rng_for(7))  # the released SWA pages are skipped
    for side in (a.full_attn_allocator, a.swa_attn_allocator, a.mamba_allocator):
        assert side.allocated_count() == 0
    w.check("after finishing")


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("store_kind", ["unified", "engine"])
def test_kv_and_state_follow_their_tokens_through_compaction(device, lazy, store_kind):
    w = decoupled(device, lazy, store_kind)
    a = w.alloc
    rng = rng_for(8)
    requests = [admit(w, 3 * FULL_PAGE, rng) for _ in range(4)]
    # The window leaves a few SWA pages of requests 1 and 3; requests 0 and 2 end.
    release_window(w, requests[1], 3)
    release_window(w, requests[3], 5)
    w.finish([0, 2], rng)
    if lazy:
        for side in (a.full_attn_allocator, a.swa_attn_allocator, a.mamba_allocator):
            side._flush(urgent=True)
    moved = [s.counters()["pages_moved"] for s in a._pair.sides]
    assert all(m > 0 for m in moved), f"a side was not compacted: pages moved {moved}"
    w.check("after compaction")


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("store_kind", ["unified", "engine"])
def test_decoupled_tri_pool_serving_workload(device, seed, lazy, store_kind):
    rng = rng_for(seed * 1000 + 11 + lazy)
    w = TriWorld(device, 8, lazy, store_kind, 1 << 16, rng.uniform(0.2, 0.8), swa_page_size=2)
    for i in range(150):
        step(w, rng, i)
    assert w.refused > 0, "the run never filled the buffer"
    w.finish(list(w.running), rng)
    w.check("after finishing every request")


@pytest.mark.parametrize("bad", [0, -4, 3, 32, 2.0, True])
def test_a_bad_swa_page_size_is_refused_before_anything_is_built(device, bad):
    pool = tri_pool(device, FULL_PAGE)
    before = unbound_pool_state(pool)
    with pytest.raises(ValueError, match="swa_page_size"):
        UnifiedMambaSWATokenToKVPoolAllocator(
            unified_buffer=pool,
            kvcache=None,
            device=device,
            page_size=FULL_PAGE,
            swa_page_size=bad,
        )
    assert unbound_pool_state(pool) == before and not pool._layout_fixed
    assert pool.side_page_size("swa") == FULL_PAGE
    # The pool is as it was: a good SWA page size binds it.
    alloc = UnifiedMambaSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=None,
        device=device,
        page_size=FULL_PAGE,
        swa_page_size=SWA_PAGE,
    )
    assert alloc.alloc(FULL_PAGE) is not None
    assert alloc.swa_attn_allocator.live_page_count == RATIO
    alloc.check_invariants()
