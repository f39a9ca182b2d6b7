"""MultiEndedAllocator on its own: two sides bound as peers, built as the reference
builds them; translate, tombstones, the kvcache relocation protocol, misuse."""

import pytest
import torch

import kvpool
from kvpool.sglang import MultiEndedAllocator, UnifiedMHATokenToKVPool
from support import EngineKV, EngineStateKV, PageMajorStore, Stamped, check_all, rng_for, swa_pool


def two_sides(device, page_size, lazy, full_kv="unified", other_kv="unified", owner_pair=True):
    """ "full" (grows up) and "swa" (grows down), both id owners unless owner_pair is False."""
    pool = swa_pool(device, page_size, 1 << 15)
    caches, stores = [], []
    for name, kind in (("full", full_kv), ("swa", other_kv)):
        pages = pool.max_slots(name) // page_size
        if kind == "unified":
            cache = UnifiedMHATokenToKVPool(
                unified_buffer=pool, sub_pool_name=name, page_size=page_size
            )
            stores.append(PageMajorStore(cache))
        else:
            cache = (EngineKV if kind == "engine" else EngineStateKV)(pages * page_size, device)
            stores.append(cache)
        caches.append(cache)
    sides = [
        MultiEndedAllocator(
            kvcache=caches[i],
            unified_buffer=pool,
            sub_pool_name=name,
            device=device,
            is_id_owner=owner_pair or i == 0,
            page_size=page_size,
            lazy_compaction=lazy,
        )
        for i, name in enumerate(("full", "swa"))
    ]
    sides[0].bind_peer(sides[1])
    return pool, sides, caches, [Stamped(s, st) for s, st in zip(sides, stores)]


def test_attributes_follow_the_reference(device):
    pool, (up, down), _, _ = two_sides(device, 4, False)
    spec = pool.spec("full")
    assert up.max_slots == pool.total_bytes // spec.entry_bytes()
    assert up.num_pages == up.max_slots // 4 and up.num_virtual_ids == up.num_pages
    # The reference's reserved floor: page 0 of every paged sub-pool (slot 0's rows spread
    # over its page), at least the largest slot.
    floor = 4 * max(pool.spec("full").entry_bytes(), pool.spec("swa").entry_bytes())
    assert up.min_slot_index == -(-floor // spec.entry_bytes())
    assert up.min_page_index == -(-up.min_slot_index // 4)
    assert up.grow_direction == "up" and down.grow_direction == "down"
    assert (
        up.watermark_physical == up.min_page_index and down.watermark_physical == down.num_pages - 1
    )
    for side in (up, down):
        for table in (side.virtual_to_physical, side.physical_to_virtual):
            assert table.dtype == torch.int64 and table.device.type == torch.device(device).type
            assert table[0] == 0 and (table[1:] == -1).all()
    assert up.virtual_to_physical.shape == (up.num_pages + 1,)
    assert up.physical_to_virtual.shape == (up.num_pages + 1,)
    assert up.free_virtual_ids.tolist() == list(range(up.min_page_index, up.num_pages))
    assert up.entry_bytes_per_page == 4 * spec.entry_bytes()
    assert up.peer is down and down.peer is up


def test_translate_out_in_place_and_tombstones(device):
    _, (up, _), _, _ = two_sides(device, 4, False)
    ids = up.alloc(12)
    expect = up.translate_kv_loc(ids)
    buf = ids.clone()
    ptr = buf.data_ptr()
    got = up.translate_kv_loc(buf, out=buf)
    assert got.data_ptr() == ptr and torch.equal(buf, expect)
    out = torch.full((12,), 7, dtype=torch.int64, device=ids.device)
    assert up.translate_kv_loc(ids, out=out) is out and torch.equal(out, expect)
    two_d = ids.view(3, 4)
    assert torch.equal(up.translate_kv_loc(two_d), expect.view(3, 4))
    with pytest.raises(AssertionError):
        up.translate_kv_loc(ids, out=torch.empty(12, dtype=torch.int32, device=ids.device))
    with pytest.raises(AssertionError):
        up.translate_kv_loc(ids, out=torch.empty(11, dtype=torch.int64, device=ids.device))
    # Freed ids and -1 padding read the sink.
    up.free(ids[:4])
    pad = torch.tensor([-1], dtype=torch.int64, device=ids.device)
    assert (up.translate_kv_loc(torch.cat([ids[:4], pad])) == 0).all()
    assert up.virtual_to_physical[-1] == -1  # the sentinel row a -1 index reads


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("page_size", [1, 4])
def test_kvcache_protocol_moves_when_the_reference_does(device, seed, lazy, page_size):
    """The engine's move_kv_cache(dst, src) runs inside free (eager) or the flushes
    (lazy), with int64 physical token ids on the device, destination first."""
    rng = rng_for(seed)
    pool, (up, down), caches, stamped = two_sides(
        device, page_size, lazy, "engine", "copy_from_physical"
    )
    live = {0: [], 1: []}
    for step in range(120):
        i = rng.randrange(2)
        side, cache = (up, down)[i], caches[i]
        before = len(cache.calls)
        op = rng.choice(["alloc", "alloc", "free", "flush"])
        if op == "alloc":
            ids = side.alloc(rng.randint(1, 3) * page_size)
            if ids is not None:
                live[i] += ids.tolist()
                stamped[i].stamp(ids.tolist(), rng)
            # Allocation never moves this side's own pages (only a lazy peer flush moves the peer's).
            assert len(cache.calls) == before
        elif op == "free" and live[i]:
            # One token of a page frees the whole page, as in the reference.
            pages = sorted({t // page_size for t in live[i]})
            freed = set(rng.sample(pages, rng.randint(1, len(pages))))
            named = [p * page_size + rng.randrange(page_size) for p in freed]
            side.free(torch.tensor(named, device=side.device))
            gone = [t for t in live[i] if t // page_size in freed]
            live[i] = [t for t in live[i] if t // page_size not in freed]
            stamped[i].forget(gone)
            if lazy:
                assert len(cache.calls) == before, "a lazy free moved KV"
        elif op == "flush":
            moved = side.flush_opportunistic()
            if not lazy:
                assert moved == 0 and len(cache.calls) == before
        for j, call in enumerate(cache.calls[before:]):
            dst, src = call
            assert dst.device == side.device and dst.dtype == torch.int64
            assert dst.numel() % page_size == 0 and not set(dst.tolist()) & set(src.tolist())
        for k in (0, 1):
            check_all((up, down)[k], live[k], stamped[k], f"step {step} ({op} on side {i})")
    assert caches[0].calls or caches[1].calls, "no relocation happened: the test exercised nothing"


def test_no_kvcache_moves_the_unified_bytes(device):
    pool, (up, down), _, stamped = two_sides(device, 1, False)
    assert up.relocation == "kvpool"
    rng = rng_for(3)
    ids = up.alloc(40)
    stamped[0].stamp(ids.tolist(), rng)
    up.free(ids[:20:2])  # eager: survivors move into the holes
    stamped[0].forget(ids[:20:2].tolist())
    live = [t for t in ids.tolist() if t not in set(ids[:20:2].tolist())]
    check_all(up, live, stamped[0], "after an eager free with moves")
    assert up.counters()["pages_moved"] > 0


def test_double_free_and_misuse_raise_and_change_nothing(device):
    _, (up, down), _, _ = two_sides(device, 4, False, owner_pair=False)
    ids = up.alloc(8)
    up.free(ids[:4])
    state = (up.available_size(), up.virtual_to_physical.clone())
    with pytest.raises(AssertionError) as err:
        up.free(ids[:4])
    assert isinstance(err.value, kvpool.KVPoolError) and err.value.code == 4
    with pytest.raises(AssertionError):
        up.alloc(3)  # not a multiple of the page size
    with pytest.raises(AssertionError):
        down.alloc(4)  # a non-owner does not mint ids
    with pytest.raises(AssertionError):
        up.alloc_decode(
            torch.tensor([9]), torch.tensor([9]), torch.tensor([ids[7]], dtype=torch.int32)
        )
    with pytest.raises(AssertionError):
        up.alloc_decode(torch.tensor([9, 9]), torch.tensor([9, 9]), ids[7:8].to(up.device))
    with pytest.raises(AssertionError):
        up.translate_kv_loc(ids.to(torch.float32))
    with pytest.raises(AssertionError):
        up.alloc_extend(
            None, torch.tensor([0]), None, torch.tensor([4]), ids[7:8].clone(), 5
        )  # 4 ids needed
    assert up.available_size() == state[0] and torch.equal(up.virtual_to_physical, state[1])
    up.check_invariants()


def test_non_owner_binds_peer_minted_pages(device):
    _, (up, down), _, stamped = two_sides(device, 4, False, owner_pair=False)
    ids = up.alloc(8)
    pages = torch.unique(ids // 4)
    down.alloc_with_virtual(pages)
    assert (down.virtual_to_physical[pages] >= down.min_page_index).all()
    assert down.free_virtual_ids is None
    down.free(ids)
    up.free(ids)
    check_all(down, [], stamped[1])
    check_all(up, [], stamped[0])
