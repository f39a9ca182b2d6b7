"""SGLang's own conventions, driven as its tests and engine drive the classes: a pair bound
with two bind_peer calls, a UnifiedKVPool built without page_size under allocators with one,
sides of different entry sizes walked through v2p[1:num_virtual_ids], and the full-location
write path of UnifiedSWAKVPool. Data checks where the bytes matter."""

from types import SimpleNamespace

import pytest
import torch

from kvpool.errors import InvalidArgumentError
from kvpool.sglang import (
    KVWriteLoc,
    MHASubPoolSpec,
    MultiEndedAllocator,
    UnifiedHybridLinearKVPool,
    UnifiedKVPool,
    UnifiedMambaTokenToKVPoolAllocator,
    UnifiedMHATokenToKVPool,
    UnifiedSWAKVPool,
    UnifiedSWATokenToKVPoolAllocator,
    move_kv_cache_native,
)
from support import EngineKV, mamba_spec, rng_for


def spec(name, grow, layers=2, heads=2, head_dim=4):
    return MHASubPoolSpec(
        name=name,
        layer_num=layers,
        head_num=heads,
        head_dim=head_dim,
        store_dtype=torch.float16,
        grow_direction=grow,
    )


def pool_of(device, full, swa, full_pages, swa_pages, **kwargs):
    """As SGLang's paged tests size it (pages of 8 tokens), without page_size unless kwargs
    give one."""
    total = 8 * (full_pages * full.entry_bytes() + swa_pages * swa.entry_bytes())
    return UnifiedKVPool(total_bytes=total, sub_pool_specs=[full, swa], device=device, **kwargs)


def allocator(pool, name, kvcache, device, page_size, owner=True, lazy=False):
    return MultiEndedAllocator(
        kvcache=kvcache,
        unified_buffer=pool,
        sub_pool_name=name,
        device=device,
        is_id_owner=owner,
        page_size=page_size,
        lazy_compaction=lazy,
    )


def tables(side):
    return side.virtual_to_physical.clone(), side.physical_to_virtual.clone()


# ---------------------------------------------------------------- 1. bind_peer twice
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_pair_bound_with_two_bind_peer_calls(device, lazy):
    pool = pool_of(device, spec("full", "up"), spec("swa", "down"), 16, 8)
    full = allocator(pool, "full", None, device, 8, lazy=lazy)
    swa = allocator(pool, "swa", None, device, 8, lazy=lazy)
    full.bind_peer(swa)
    before = full.allocator_state_str(), swa.allocator_state_str()
    swa.bind_peer(full)  # SGLang's second, symmetric call
    full.bind_peer(swa)  # and any repeat
    assert (full.allocator_state_str(), swa.allocator_state_str()) == before
    assert full.peer is swa and swa.peer is full
    # Bound natively: the two share the gap, so one side's pages leave the other less room.
    room = swa.available_size()
    got = full.alloc(full.available_size())
    assert got is not None and got.numel() > 0
    assert swa.available_size() < room
    full.free(got)
    full.flush_opportunistic()  # lazy: the holes go back to the gap
    assert swa.available_size() == room
    full.check_invariants()
    swa.check_invariants()


def test_bind_peer_to_another_peer_is_refused_and_changes_nothing(device):
    pool = pool_of(device, spec("full", "up"), spec("swa", "down"), 16, 8)
    full = allocator(pool, "full", None, device, 8)
    swa = allocator(pool, "swa", None, device, 8)
    other = allocator(pool, "swa", None, device, 8)
    full.bind_peer(swa)
    swa.bind_peer(full)
    live = full.alloc(16)
    before = [tables(s) for s in (full, swa, other)]
    states = [s.allocator_state_str() for s in (full, swa, other)]
    for a, b in ((full, other), (other, full), (other, swa)):
        with pytest.raises(InvalidArgumentError, match="one peer only"):
            a.bind_peer(b)
    assert full.peer is swa and swa.peer is full and other.peer is None
    assert [s.allocator_state_str() for s in (full, swa, other)] == states
    for s, (v2p, p2v) in zip((full, swa, other), before):
        assert torch.equal(s.virtual_to_physical, v2p) and torch.equal(s.physical_to_virtual, p2v)
    full.free(live)
    full.check_invariants()


def test_pair_classes_accept_bind_peer_on_their_sides(device):
    pool = pool_of(device, spec("full", "up"), spec("swa", "down"), 16, 16)
    pair = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=None,
        device=device,
        full_max_total_num_tokens=128,
        swa_max_total_num_tokens=128,
        page_size=8,
    )
    fa, sa = pair.full_attn_allocator, pair.swa_attn_allocator
    fa.bind_peer(sa)
    sa.bind_peer(fa)
    v = pair.alloc(16)
    assert v is not None and (sa.virtual_to_physical[v // 8] >= 0).all()
    pair.check_invariants()


# ---------------------------------------------------------------- 2. page size on the allocator
def stamp(kv_pool, physical, value):
    """Writes value + token index into every layer's K and V rows of the physical tokens."""
    n = physical.numel()
    rows = (value + torch.arange(n, dtype=torch.float32)).to(torch.float16)
    k = rows[:, None, None].expand(n, kv_pool.head_num, kv_pool.head_dim).to(kv_pool.device)
    for layer in range(kv_pool.layer_num):
        kv_pool.set_kv_buffer(SimpleNamespace(layer_id=layer), physical, k, -k)
    return rows


def read(kv_pool, physical):
    """Every layer's K and V of the physical tokens through the (page-1) views."""
    out = []
    for layer in range(kv_pool.layer_num):
        k, v = kv_pool.get_kv_buffer(layer)
        page, slot = physical // k.shape[1], physical % k.shape[1]
        out.append((k[page, slot].cpu(), v[page, slot].cpu()))
    return out


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("cache", ["unified", "engine"])
def test_pool_without_page_size_allocator_with_one(device, lazy, cache, seed):
    """UnifiedKVPool(...) without page_size, then MultiEndedAllocator(page_size=8): the
    allocator's pages are 8 tokens, the views stay page 1, and compaction carries every
    token's bytes (kvpool's page move, or the engine's move_kv_cache)."""
    rng = rng_for(seed)
    ps = 8
    pool = pool_of(device, spec("full", "up", layers=3), spec("swa", "down"), 16, 8)
    assert pool.side_page_size("full") == 1
    kv = UnifiedMHATokenToKVPool(unified_buffer=pool, sub_pool_name="full", page_size=ps)
    engine = EngineKV(pool.max_slots("full"), device) if cache == "engine" else None
    full = allocator(pool, "full", kv if engine is None else engine, device, ps, lazy=lazy)
    swa = allocator(pool, "swa", None, device, ps, lazy=lazy)
    full.bind_peer(swa)
    swa.bind_peer(full)
    assert full.page_size == ps and pool.side_page_size("full") == ps
    assert pool.side_page_size("swa") == ps
    k_views, _ = pool.mha_views_for("full")
    assert tuple(k_views[0].shape[:2]) == (pool.max_slots("full"), 1)
    assert full.num_pages == pool.max_slots("full") // ps
    assert full.virtual_to_physical.shape == (full.num_pages + 1,)

    live = {}  # virtual token -> stamp base of its request
    requests = []
    for i in range(6):
        v = full.alloc(ps * rng.randrange(1, 3))
        assert v is not None
        phys = full.translate_kv_loc(v)
        assert (phys // ps == full.virtual_to_physical[v // ps]).all()
        base = float(100 * (i + 1))
        if engine is None:
            stamp(kv, phys, base)
        else:
            engine.write(phys, torch.arange(v.numel(), device=device) + int(base))
        requests.append((v, base))
    for j in sorted(rng.sample(range(len(requests)), 3), reverse=True):
        full.free(requests.pop(j)[0])
    full.flush_opportunistic()
    for v, base in requests:
        phys = full.translate_kv_loc(v)
        if engine is None:
            want = (base + torch.arange(v.numel(), dtype=torch.float32)).to(torch.float16)
            for k, val in read(kv, phys):
                assert torch.equal(k[:, 0, 0], want) and torch.equal(val[:, 0, 0], -want)
        else:
            assert torch.equal(
                engine.rows[phys].cpu(), torch.arange(v.numel()) + int(base)
            ), f"seed {seed}"
        live.update({int(t): base for t in v.tolist()})
    full.check_invariants()
    assert full.allocated_count() == len(live)


def test_pair_classes_take_the_allocator_page_size(device):
    pool = pool_of(device, spec("full", "up"), spec("swa", "down"), 16, 16)
    pair = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=None,
        device=device,
        full_max_total_num_tokens=128,
        swa_max_total_num_tokens=128,
        page_size=8,
    )
    assert pair.full_attn_allocator.page_size == 8 and pair.swa_attn_allocator.page_size == 8
    v = pair.alloc(16)
    assert v is not None and v.numel() == 16
    assert (v.view(2, 8) % 8 == torch.arange(8, device=v.device)).all()

    full = spec("full", "down")
    state = mamba_spec("mamba", 2, "up")
    mpool = UnifiedKVPool(
        total_bytes=64 * 8 * full.entry_bytes() + 16 * state.entry_bytes(),
        sub_pool_specs=[full, state],
        device=device,
    )
    mamba_pair = UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=mpool, kvcache=None, device=device, page_size=8
    )
    assert mamba_pair.full_attn_allocator.page_size == 8
    assert mamba_pair.mamba_allocator.page_size == 1
    assert mpool.side_page_size("full") == 8 and mpool.side_page_size("mamba") == 1
    assert mamba_pair.alloc(8) is not None


def test_page_sizes_that_do_not_fit_are_refused_and_change_nothing(device):
    pool = pool_of(device, spec("full", "up"), spec("swa", "down"), 16, 8, page_size=4)
    raw = pool._raw
    # Not a multiple of the views' page size: an allocator page would split a view page.
    with pytest.raises(InvalidArgumentError, match="not a multiple"):
        allocator(pool, "full", None, device, 6)
    assert pool.side_page_size("full") == 4 and pool._raw is raw
    full = allocator(pool, "full", None, device, 8)
    assert pool.side_page_size("full") == 8 and pool.side_page_size("swa") == 8
    # Fixed now: another page size for a KV sub-pool is refused, naming both.
    with pytest.raises(InvalidArgumentError, match="fixed when the first allocator"):
        allocator(pool, "swa", None, device, 4)
    with pytest.raises(InvalidArgumentError, match="fixed when the first allocator"):
        UnifiedSWATokenToKVPoolAllocator(
            unified_buffer=pool,
            kvcache=None,
            device=device,
            full_max_total_num_tokens=64,
            swa_max_total_num_tokens=64,
            page_size=16,
        )
    swa = allocator(pool, "swa", None, device, 8)
    full.bind_peer(swa)
    swa.bind_peer(full)
    assert full.alloc(8) is not None
    full.check_invariants()
    # Mamba state is one slot per request: page size 1 only.
    mpool = UnifiedKVPool(
        total_bytes=1 << 16,
        sub_pool_specs=[spec("full", "down"), mamba_spec("mamba", 2, "up")],
        device=device,
    )
    with pytest.raises(InvalidArgumentError, match="Mamba state"):
        allocator(mpool, "mamba", None, device, 8)
    assert mpool.side_page_size("mamba") == 1 and mpool.side_page_size("full") == 1


def test_move_kv_cache_native_over_page_major_views(device):
    pool = pool_of(device, spec("full", "up"), spec("swa", "down"), 8, 8, page_size=8)
    k, v = pool.mha_views_for("full")
    for layer in range(2):
        k[layer][0, 5] = float(layer + 1)
        v[layer][1, 6] = -float(layer + 1)
    move_kv_cache_native(
        k,
        v,
        torch.tensor([23, 31], device=device),
        torch.tensor([5, 14], device=device),
        page_size=8,
    )
    for layer in range(2):
        assert (k[layer][2, 7] == layer + 1).all() and (v[layer][3, 7] == -(layer + 1)).all()
        assert (k[layer][0, 5] == layer + 1).all()  # a move copies


# ---------------------------------------------------------------- 3. the SWA side's id space
@pytest.mark.parametrize("full_layers,swa_layers", [(4, 2), (2, 4)])
def test_swa_side_v2p_walk_over_num_virtual_ids(device, full_layers, swa_layers, seed):
    """Different entry sizes on the two sides: every side's v2p has num_virtual_ids + 1
    rows, so the reference's walk over v2p[1:num_virtual_ids] stays in the table and finds
    every live page (SGLang's sub-pool invariant check)."""
    rng = rng_for(seed)
    full_spec, swa_spec = spec("full", "up", full_layers), spec("swa", "down", swa_layers)
    total = 32 * full_spec.entry_bytes() + 16 * swa_spec.entry_bytes()
    pool = UnifiedKVPool(
        total_bytes=total, sub_pool_specs=[full_spec, swa_spec], device=device
    )
    pair = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=None,
        device=device,
        full_max_total_num_tokens=32,
        swa_max_total_num_tokens=16,
    )
    live = []
    for _ in range(20):
        if live and rng.random() < 0.4:
            pair.free(live.pop(rng.randrange(len(live))))
        else:
            v = pair.alloc(rng.randrange(1, 4))
            if v is not None:
                live.append(v)
    for sub in (pair.full_attn_allocator, pair.swa_attn_allocator):
        v2p, p2v = sub.virtual_to_physical, sub.physical_to_virtual
        assert v2p.shape[0] == sub.num_virtual_ids + 1
        walked = [v for v in range(1, sub.num_virtual_ids) if int(v2p[v]) != -1]
        assert sorted(walked) == sorted(int(t) for v in live for t in v.tolist())
        for v in walked:
            assert int(p2v[int(v2p[v])]) == v
        if sub.grow_direction == "up":
            lo, hi = sub.min_slot_index, sub.watermark_physical
        else:
            lo, hi = sub.watermark_physical + 1, sub.max_slots
        assert hi - lo == len(walked)


def test_standalone_non_owner_spans_its_owner_ids_once_bound(device):
    pool = pool_of(device, spec("full", "up", 4), spec("swa", "down", 2), 8, 8, page_size=1)
    full = allocator(pool, "full", None, device, 1)
    swa = allocator(pool, "swa", None, device, 1, owner=False)
    full.bind_peer(swa)
    swa.bind_peer(full)
    assert swa.num_virtual_ids == full.num_virtual_ids == full.num_pages
    assert swa.virtual_to_physical.shape[0] == swa.num_virtual_ids + 1
    ids = full.alloc(3)
    swa.alloc_with_virtual(ids)
    walked = [v for v in range(1, swa.num_virtual_ids) if int(swa.virtual_to_physical[v]) != -1]
    assert walked == sorted(ids.tolist())


# ---------------------------------------------------------------- 8. write-location routing
def swa_kv(device, layers=(0, 2), swa_layers=(1, 3)):
    pool = pool_of(device, spec("full", "up"), spec("swa", "down"), 16, 16, page_size=4)
    kv = UnifiedSWAKVPool(
        unified_buffer=pool,
        swa_attention_layer_ids=list(swa_layers),
        full_attention_layer_ids=list(layers),
        page_size=4,
    )
    pair = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=kv,
        device=device,
        full_max_total_num_tokens=64,
        swa_max_total_num_tokens=64,
        page_size=4,
    )
    return pool, kv, pair


@pytest.mark.parametrize("sglang_loc", [False, True], ids=["kvpool", "sglang-shaped"])
def test_set_kv_buffer_full_loc_fast_path(device, sglang_loc):
    """Full layers write at the write metadata's full_loc, SWA layers at its swa_loc, both
    physical; the virtual loc is never written through."""
    pool, kv, pair = swa_kv(device)
    pair.alloc(8)
    v = pair.alloc(4)
    full_loc = pair.translate_kv_loc(v)
    swa_loc = pair.translate_loc_from_full_to_swa(v).to(torch.int64)
    # The sides grow toward each other: the two physical locations differ.
    assert not torch.equal(full_loc, swa_loc)
    make = SimpleNamespace if sglang_loc else KVWriteLoc
    loc = make(loc=v, swa_loc=swa_loc, full_loc=full_loc)
    k = torch.full((4, 2, 4), 3.0, dtype=torch.float16, device=device)
    before = pool._raw.clone()
    kv.set_kv_buffer(SimpleNamespace(layer_id=2), loc, k, -k)  # full layer, its second
    kv.set_kv_buffer(SimpleNamespace(layer_id=3), loc, 2 * k, -2 * k)  # SWA layer, its second
    fk, fv = kv.get_kv_buffer(2)
    sk, sv = kv.get_kv_buffer(3)
    full_at, swa_at = (full_loc // 4, full_loc % 4), (swa_loc // 4, swa_loc % 4)
    assert (fk[full_at] == 3).all() and (fv[full_at] == -3).all()
    assert (sk[swa_at] == 6).all() and (sv[swa_at] == -6).all()
    # Nothing else changed: 4 tokens x (K + V) x 8 halves x 2 layers of bytes differ.
    changed = int((pool._raw != before).sum())
    assert 0 < changed <= 2 * 4 * 2 * 8 * 2


def test_set_kv_buffer_without_its_sub_pool_loc_is_refused(device):
    pool, kv, pair = swa_kv(device)
    v = pair.alloc(4)
    k = torch.ones((4, 2, 4), dtype=torch.float16, device=device)
    before = pool._raw.clone()
    with pytest.raises(AssertionError, match="full_loc"):
        kv.set_kv_buffer(SimpleNamespace(layer_id=0), KVWriteLoc(v, swa_loc=v), k, k)
    with pytest.raises(AssertionError, match="swa_loc"):
        kv.set_kv_buffer(SimpleNamespace(layer_id=1), KVWriteLoc(v, full_loc=v), k, k)
    with pytest.raises(AssertionError):
        kv.set_kv_buffer(SimpleNamespace(layer_id=0), v, k, k)  # bare (virtual) ids
    assert torch.equal(pool._raw, before)


def test_virt_tokens_to_phys_tokens_matches_translate(device):
    _, kv, pair = swa_kv(device)
    v = pair.alloc(8)
    for side, translate in (
        (pair.full_attn_allocator, pair.translate_kv_loc),
        (pair.swa_attn_allocator, pair.translate_loc_from_full_to_swa),
    ):
        assert torch.equal(
            UnifiedSWAKVPool._virt_tokens_to_phys_tokens(v, side), translate(v).to(torch.int64)
        )


def test_hybrid_linear_set_kv_buffer_writes_full_loc_else_loc(device):
    pool = pool_of(device, spec("full", "up"), spec("swa", "down"), 8, 8)
    full = UnifiedMHATokenToKVPool(unified_buffer=pool, sub_pool_name="full")
    hybrid = UnifiedHybridLinearKVPool(
        full_kv_pool=full, mamba_pool=None, full_attention_layer_ids=[3, 7]
    )
    k = torch.full((2, 2, 4), 5.0, dtype=torch.float16, device=device)
    virtual = torch.tensor([40, 41], device=device)
    physical = torch.tensor([20, 21], device=device)
    hybrid.set_kv_buffer(SimpleNamespace(layer_id=7), KVWriteLoc(virtual, full_loc=physical), k, k)
    kb = full.get_key_buffer(1)
    assert (kb[physical, 0] == 5).all() and (kb[virtual, 0] == 0).all()
    hybrid.set_kv_buffer(SimpleNamespace(layer_id=3), physical, 2 * k, k)  # static: loc is physical
    assert (full.get_key_buffer(0)[physical, 0] == 10).all()
