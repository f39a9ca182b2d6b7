"""The SWA pair with a smaller page on the SWA side (issue #30, decoupled page sizes),
through kvpool.native and kvpool.sglang: each full page binds ratio SWA pages,
free_swa releases the window one SWA page at a time, KV bytes stored for a token are
found again after compaction, and a bad SWA page size is refused before anything is
built."""

import gc

import pytest
import torch

from kvpool import native
from kvpool.errors import InvalidArgumentError
from kvpool.sglang import UnifiedSWAKVPool, UnifiedSWATokenToKVPoolAllocator
from support import rng_for, swa_pool, unbound_pool_state
from test_swa_pair import SwaWorld, step

FULL_PAGE, SWA_PAGE = 16, 4
RATIO = FULL_PAGE // SWA_PAGE


def decoupled(device, lazy=False, store_kind="unified", total_bytes=1 << 17):
    return SwaWorld(
        device, FULL_PAGE, lazy, store_kind, total_bytes=total_bytes, swa_page_size=SWA_PAGE
    )


def test_native_pair_takes_the_buffer_sides_page_sizes(device):
    buffer = native.UnifiedKVPool(
        1 << 16, [("full", 64, FULL_PAGE, "up"), ("swa", 32, SWA_PAGE, "down")], device
    )
    pair = native.UnifiedSWAAllocator(buffer, native.allocator_options(), native.allocator_options())
    assert (pair.full.info.page_size, pair.swa.info.page_size) == (FULL_PAGE, SWA_PAGE)
    ids = pair.alloc(2 * FULL_PAGE)
    assert pair.full.state().live_pages == 2
    assert pair.swa.state().live_pages == 2 * RATIO
    pair.free_swa(ids[: 3 * SWA_PAGE])
    assert pair.swa.state().live_pages == 2 * RATIO - 3
    assert pair.swa.state().allocated_count == 2 * FULL_PAGE - 3 * SWA_PAGE
    assert pair.full.state().allocated_count == 2 * FULL_PAGE
    pair.free(ids)
    assert pair.full.state().allocated_count == 0 == pair.swa.state().allocated_count
    pair.full.check_invariants()
    pair.swa.check_invariants()


def test_native_pair_refuses_an_swa_page_that_does_not_divide(device):
    buffer = native.UnifiedKVPool(
        1 << 16, [("full", 64, FULL_PAGE, "up"), ("swa", 32, 6, "down")], device
    )
    gc.collect()
    baseline = native.live_handles()
    with pytest.raises(InvalidArgumentError, match="size 6 does not divide the full side's 16"):
        native.UnifiedSWAAllocator(buffer, native.allocator_options(), native.allocator_options())
    gc.collect()
    assert native.live_handles() == baseline


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_a_full_page_binds_ratio_swa_pages(device, lazy):
    w = decoupled(device, lazy)
    a = w.alloc
    assert a.full_attn_allocator.page_size == FULL_PAGE
    assert a.swa_attn_allocator.page_size == SWA_PAGE
    assert w.kv.swa_kv_pool.k_buffer[0].shape[1] == SWA_PAGE
    ids = a.alloc(3 * FULL_PAGE)
    assert a.full_attn_allocator.live_page_count == 3
    assert a.swa_attn_allocator.live_page_count == 3 * RATIO
    swa = a.translate_loc_from_full_to_swa(ids).to(torch.int64).cpu()
    # Each SWA page is contiguous and keeps the tokens' offsets in it.
    assert torch.equal(swa % SWA_PAGE, ids.cpu() % SWA_PAGE)
    assert len(set((swa // SWA_PAGE).tolist())) == 3 * RATIO
    # A prefill of part of a full page binds the whole full page's SWA pages.
    prefix, seq = torch.tensor([0]), torch.tensor([6])
    last = w.last_loc([None])
    short = a.alloc_extend(prefix.to(w.device), prefix, seq.to(w.device), seq, last, 6)
    assert a.full_attn_allocator.live_page_count == 4
    assert a.swa_attn_allocator.live_page_count == 4 * RATIO
    w.add_request(ids.tolist())
    w.add_request(short.tolist())
    w.stamp(ids.tolist() + short.tolist(), rng_for(3))
    w.check("after binding")


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_free_swa_releases_one_swa_page_at_a_time(device, lazy):
    w = decoupled(device, lazy)
    a = w.alloc
    ids = a.alloc(4 * FULL_PAGE)
    w.add_request(ids.tolist())
    w.stamp(ids.tolist(), rng_for(4))
    swa_room = a.swa_available_size()
    for k in range(1, RATIO + 2):  # past the first full page, one SWA page at a time
        gone = ids[(k - 1) * SWA_PAGE : k * SWA_PAGE]
        a.free_swa(gone)
        w.swa_freed[0] = k * SWA_PAGE
        w.swa.forget(gone.tolist())
        assert a.swa_attn_allocator.live_page_count == 4 * RATIO - k
        assert a.swa_attn_allocator.allocated_count() == 4 * FULL_PAGE - k * SWA_PAGE
        assert (a.translate_loc_from_full_to_swa(gone) == 0).all()
        w.check(f"after free_swa of SWA page {k}")
    assert a.full_attn_allocator.allocated_count() == 4 * FULL_PAGE
    assert (a.translate_loc_from_full_to_swa(ids[(RATIO + 1) * SWA_PAGE :]) > 0).all()
    if not lazy:  # a lazy side's released pages are holes until a flush
        assert a.swa_available_size() == swa_room + (RATIO + 1) * SWA_PAGE
    a.free(ids)  # the released SWA pages are skipped
    w.requests.clear()
    w.full.stamps.clear()
    w.swa.stamps.clear()
    assert a.full_attn_allocator.allocated_count() == 0 == a.swa_attn_allocator.allocated_count()
    w.check("after free")


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("store_kind", ["unified", "engine"])
def test_kv_bytes_follow_their_tokens_through_compaction(device, lazy, store_kind):
    w = decoupled(device, lazy, store_kind)
    a = w.alloc
    rng = rng_for(5)
    for _ in range(4):
        ids = a.alloc(3 * FULL_PAGE)
        w.add_request(ids.tolist())
        w.stamp(ids.tolist(), rng)
    # The window leaves a few SWA pages of requests 1 and 3; request 0 and 2 end.
    for r, pages in ((1, 3), (3, 5)):
        gone = w.requests[r][: pages * SWA_PAGE]
        a.free_swa(torch.tensor(gone))
        w.swa_freed[r] = pages * SWA_PAGE
        w.swa.forget(gone)
    for r in (0, 2):
        gone = w.requests.pop(r)
        w.swa_freed.pop(r)
        a.free(torch.tensor(gone))
        w.full.forget(gone)
        w.swa.forget(gone)
    if lazy:
        a.full_attn_allocator._flush(urgent=True)
        a.swa_attn_allocator._flush(urgent=True)
    moved = [s.counters()["pages_moved"] for s in a._pair.sides]
    assert moved[0] > 0 and moved[1] > 0, f"nothing was compacted: pages moved {moved}"
    w.check("after compaction")


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("store_kind", ["unified", "engine"])
def test_decoupled_serving_workload(device, seed, lazy, store_kind):
    rng = rng_for(seed * 1000 + 7 + lazy)
    w = SwaWorld(device, 8, lazy, store_kind, swa_page_size=2)
    for i in range(150):
        step(w, rng, lazy, i)


@pytest.mark.parametrize("bad", [0, -4, 3, 32, 2.0, True])
def test_a_bad_swa_page_size_is_refused_before_anything_is_built(device, bad):
    pool = swa_pool(device, FULL_PAGE)
    before = unbound_pool_state(pool)
    with pytest.raises(ValueError, match="swa_page_size"):
        UnifiedSWAKVPool(
            unified_buffer=pool,
            swa_attention_layer_ids=[1],
            full_attention_layer_ids=[0],
            page_size=FULL_PAGE,
            swa_page_size=bad,
        )
    with pytest.raises(ValueError, match="swa_page_size"):
        UnifiedSWATokenToKVPoolAllocator(
            unified_buffer=pool,
            kvcache=None,
            device=device,
            full_max_total_num_tokens=1 << 10,
            swa_max_total_num_tokens=1 << 10,
            page_size=FULL_PAGE,
            swa_page_size=bad,
        )
    assert unbound_pool_state(pool) == before and not pool._layout_fixed
    assert pool.side_page_size("swa") == FULL_PAGE
    # The pool is as it was: a good SWA page size binds it.
    alloc = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=None,
        device=device,
        full_max_total_num_tokens=1 << 10,
        swa_max_total_num_tokens=1 << 10,
        page_size=FULL_PAGE,
        swa_page_size=SWA_PAGE,
    )
    assert alloc.alloc(FULL_PAGE) is not None
    assert alloc.swa_attn_allocator.live_page_count == RATIO
    alloc.check_invariants()


def test_swa_views_of_another_page_size_are_refused(device):
    pool = swa_pool(device, FULL_PAGE)
    kv = UnifiedSWAKVPool(
        unified_buffer=pool,
        swa_attention_layer_ids=[1],
        full_attention_layer_ids=[0],
        page_size=FULL_PAGE,
    )
    with pytest.raises(InvalidArgumentError, match="page size 4 is not a multiple of"):
        UnifiedSWATokenToKVPoolAllocator(
            unified_buffer=pool,
            kvcache=kv,
            device=device,
            full_max_total_num_tokens=1 << 10,
            swa_max_total_num_tokens=1 << 10,
            page_size=FULL_PAGE,
            swa_page_size=SWA_PAGE,
        )
    assert not pool._layout_fixed
    # Once an allocator fixed the SWA side's page at 4, coarser SWA views are refused.
    pool = swa_pool(device, FULL_PAGE)
    UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=None,
        device=device,
        full_max_total_num_tokens=1 << 10,
        swa_max_total_num_tokens=1 << 10,
        page_size=FULL_PAGE,
        swa_page_size=SWA_PAGE,
    ).check_invariants()
    for coarser in (8, None):
        with pytest.raises(ValueError, match="allocator's page size 4 is not a multiple"):
            pool.mha_views_for("swa", coarser)
    assert pool.mha_views_for("swa", SWA_PAGE)[0][0].shape[1] == SWA_PAGE
