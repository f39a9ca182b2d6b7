"""MLA on the unified pool, built the way SGLang's Kimi-Linear stack builds it (keywords,
defaults, CPU tensors on a host build): an MLASubPoolSpec beside a MambaSubPoolSpec, dense
per-layer views over page-major pages (build_dense_mla_views, with one page of tail pad),
UnifiedMLATokenToKVPool, and translate_kv_loc_dense, whose ids address those views. Data is
written through the views at dense ids and read back after compaction has moved the pages."""

import random
from types import SimpleNamespace

import pytest
import torch

from kvpool.sglang import (
    MambaSubPoolSpec,
    MLASubPoolSpec,
    MultiEndedAllocator,
    UnifiedHybridLinearKVPool,
    UnifiedKVPool,
    UnifiedMambaPool,
    UnifiedMambaTokenToKVPoolAllocator,
    UnifiedMLATokenToKVPool,
    build_dense_mla_views,
    mla_entry_bytes,
)

LAYERS, LORA, ROPE = 3, 6, 2
DIM = LORA + ROPE
DTYPE = torch.bfloat16
ITEM = 2


def mla_spec(grow="down", **overrides):
    fields = dict(
        name="full",
        layer_num=LAYERS,
        kv_lora_rank=LORA,
        qk_rope_head_dim=ROPE,
        store_dtype=DTYPE,
        grow_direction=grow,
    )
    fields.update(overrides)
    return MLASubPoolSpec(**fields)


def mamba_spec(grow="up"):
    return MambaSubPoolSpec(
        name="mamba",
        layer_num=2,
        conv_state_shapes=((4, 3),),
        conv_dtype=torch.float32,
        temporal_state_shape=(2, 2, 2),
        temporal_dtype=torch.float32,
        grow_direction=grow,
    )


def kimi_pool(device, page_size, full_tokens=64, state_slots=8):
    full, mamba = mla_spec(), mamba_spec()
    return UnifiedKVPool(
        total_bytes=full.entry_bytes() * full_tokens + mamba.entry_bytes() * state_slots,
        sub_pool_specs=[full, mamba],
        device=device,
        enable_memory_saver=False,
        page_size=page_size,
        view_tail_pad_bytes=page_size * full.entry_bytes(),
    )


def kimi_stack(device, page_size, lazy, full_tokens=64, state_slots=8, full_kvcache=None):
    """What SGLang's init_unified_mamba_pools builds for an MLA hybrid: the pool, the MLA and
    state pools, their HybridLinearKVPool and the Mamba composite allocator. full_kvcache(kv)
    wraps the MLA pool as the full side's kvcache (default: the MLA pool itself)."""
    pool = kimi_pool(device, page_size, full_tokens, state_slots)
    kv = UnifiedMLATokenToKVPool(
        unified_buffer=pool, sub_pool_name="full", kv_cache_dtype=DTYPE, page_size=page_size
    )
    state = UnifiedMambaPool(unified_buffer=pool, sub_pool_name="mamba")
    alloc = UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=UnifiedHybridLinearKVPool(
            full_kv_pool=full_kvcache(kv) if full_kvcache else kv, mamba_pool=state
        ),
        device=device,
        page_size=page_size,
        lazy_compaction=lazy,
        full_kernel_page_multiplier=LAYERS,
    )
    return pool, kv, state, alloc


def dense(t, page_size):
    return (t // page_size) * (page_size * LAYERS) + t % page_size


def layer(i):
    return SimpleNamespace(layer_id=i)


def test_spec_byte_math_and_bad_dims():
    spec = mla_spec()
    assert spec.kv_cache_dim == DIM
    assert spec.entry_bytes() == LAYERS * DIM * ITEM
    assert spec.entry_bytes() == mla_entry_bytes(layer_num=LAYERS, kv_cache_dim=DIM, itemsize=ITEM)
    assert spec.get_dtype() == DTYPE
    for bad in (dict(kv_lora_rank=0), dict(qk_rope_head_dim=-1), dict(layer_num=0)):
        with pytest.raises(AssertionError):
            mla_spec(**bad)


@pytest.mark.parametrize("page_size", [1, 4])
def test_dense_views_address_the_page_envelope(page_size, seed):
    """Layer l of physical token t = p * ps + s lands at bytes p * page + l * ps * row + s * row:
    inside page p's envelope, the bytes a page move or a transfer copies."""
    rng = random.Random(seed)
    num_pages = 6
    row, page = DIM * ITEM, page_size * LAYERS * DIM * ITEM
    raw = torch.zeros((num_pages + 1) * page, dtype=torch.uint8)
    views = build_dense_mla_views(
        raw,
        layer_num=LAYERS,
        kv_cache_dim=DIM,
        store_dtype=DTYPE,
        page_size=page_size,
        num_pages=num_pages,
    )
    assert len(views) == LAYERS
    for v in views:
        assert tuple(v.shape) == (num_pages * LAYERS * page_size, 1, DIM)
        assert v.stride() == (DIM, DIM, 1)
    written = {}
    for p in range(num_pages):
        for s in range(page_size):
            for l in range(LAYERS):
                value = torch.tensor([rng.randrange(-100, 100) for _ in range(DIM)], dtype=DTYPE)
                views[l][dense(p * page_size + s, page_size), 0] = value
                written[(p, l, s)] = value
    for (p, l, s), value in written.items():
        start = p * page + l * page_size * row + s * row
        assert torch.equal(raw[start : start + row].view(DTYPE), value), (p, l, s)
    # Nothing past the pages: the tail pad is only reached by views, never written.
    assert not bool(raw[num_pages * page :].any())


def test_dense_views_need_the_tail_pad(device):
    page = 2 * LAYERS * DIM * ITEM
    with pytest.raises(AssertionError, match="tail pad"):
        build_dense_mla_views(
            torch.zeros(4 * page, dtype=torch.uint8),
            layer_num=LAYERS,
            kv_cache_dim=DIM,
            store_dtype=DTYPE,
            page_size=2,
            num_pages=4,
        )
    full, mamba = mla_spec(), mamba_spec()
    with pytest.raises(AssertionError, match="view_tail_pad_bytes"):
        UnifiedKVPool(
            total_bytes=full.entry_bytes() * 64,
            sub_pool_specs=[full, mamba],
            device=device,
            enable_memory_saver=False,
            page_size=4,
        )


def test_pool_sizes_pad_and_sink(device):
    ps = 4
    pool = kimi_pool(device, ps)
    full, mamba = pool.mla_spec("full"), pool.mamba_spec("mamba")
    total = full.entry_bytes() * 64 + mamba.entry_bytes() * 8
    # The pad extends the allocation only: capacity counts total_bytes.
    assert pool.max_slots("full") == total // full.entry_bytes()
    assert pool.max_slots("mamba") == total // mamba.entry_bytes()
    assert pool._raw.numel() == total + ps * full.entry_bytes()
    # Tombstoned ids clamp to dense id 0, whose rows spread over page 0 of the MLA side:
    # neither side's first real slot starts inside that page.
    for spec in (full, mamba):
        assert pool.min_slot_index(spec.name) * spec.entry_bytes() >= ps * full.entry_bytes()
    assert len(pool.mla_views_for("full")) == LAYERS
    with pytest.raises(AssertionError):
        pool.mla_spec("mamba")
    with pytest.raises(AssertionError):
        UnifiedKVPool(
            total_bytes=total,
            sub_pool_specs=[full, mamba],
            device=device,
            enable_memory_saver=False,
            view_tail_pad_bytes=-1,
        )


def test_mla_pool_buffers_value_is_key_prefix(device):
    pool, kv, _, _ = kimi_stack(device, 1, lazy=False)
    assert len(kv.kv_buffer) == LAYERS
    assert kv.get_kv_size_bytes() == 0
    k, v = kv.get_kv_buffer(1)
    assert k.shape[-1] == DIM and v.shape[-1] == LORA
    k[7] = 2.5
    assert bool((v[7] == 2.5).all())
    ptrs, lens, items = kv.get_contiguous_buf_infos()
    assert ptrs == [pool._raw.data_ptr()] and lens == [pool._raw.numel()]
    assert items == [pool.mla_spec("full").entry_bytes()]
    with pytest.raises(AssertionError, match="stores"):
        UnifiedMLATokenToKVPool(
            unified_buffer=pool, sub_pool_name="full", kv_cache_dtype=torch.float16
        )


@pytest.mark.parametrize("page_size", [1, 4])
def test_move_kv_cache_moves_page_envelopes(device, page_size):
    pool, kv, _, _ = kimi_stack(device, page_size, lazy=False)
    ps = page_size
    num_pages = pool.max_slots("full") // ps
    src_page, dst_page = num_pages - 3, 5
    for l in range(LAYERS):
        for s in range(ps):
            kv.kv_buffer[l][dense(src_page * ps + s, ps)] = float(l * ps + s + 1)
    offsets = torch.arange(ps, dtype=torch.int64, device=device)
    kv.move_kv_cache(dst_page * ps + offsets, src_page * ps + offsets)
    for l in range(LAYERS):
        for s in range(ps):
            got = kv.kv_buffer[l][dense(dst_page * ps + s, ps)]
            assert bool((got == float(l * ps + s + 1)).all()), (l, s)
    if ps > 1:
        with pytest.raises(AssertionError, match="runs of page_size"):
            kv.move_kv_cache(offsets[:1], offsets[:1])


class EngineKVCache:
    """An engine's own kvcache over the MLA pool (not kvpool's page-major view): compaction
    calls its move_kv_cache with physical token ids, as the reference does."""

    def __init__(self, kv):
        self.kv = kv
        self.moves = 0

    def move_kv_cache(self, tgt_loc, src_loc):
        self.moves += 1
        self.kv.move_kv_cache(tgt_loc, src_loc)


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("mover", ["kvpool", "engine"])
def test_written_through_views_found_after_compaction(device, page_size, lazy, mover, seed):
    """Requests write their KV through set_mla_kv_buffer at dense ids and their state through
    the state views; frees and flushes move pages and slots; every survivor's rows and state
    are found again through translate_kv_loc_dense and the state translate."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    ps = page_size
    pool, kv, state, alloc = kimi_stack(
        device, ps, lazy, full_kvcache=EngineKVCache if mover == "engine" else None
    )
    # The MLA pool as kvcache: kvpool moves the pages itself; an engine's object is called.
    assert alloc.full_attn_allocator.relocation == ("kvcache" if mover == "engine" else "kvpool")
    slots = alloc.mamba_allocator
    live = []  # (virtual tokens, nope per layer, rope per layer, state slot, state value)

    def free(req):
        alloc.free(req[0].cpu())
        slots.free(req[3].cpu())

    def add(step):
        n = ps * rng.randint(1, 3)
        tokens = alloc.alloc(n)
        slot = slots.alloc(1) if tokens is not None else None
        if slot is None:
            if tokens is not None:
                alloc.free(tokens.cpu())
            return False
        rows = alloc.translate_kv_loc_dense(tokens)
        nope = [torch.randn(n, 1, LORA).to(DTYPE) for _ in range(LAYERS)]
        rope = [torch.randn(n, 1, ROPE).to(DTYPE) for _ in range(LAYERS)]
        for l in range(LAYERS):
            kv.set_mla_kv_buffer(layer(l), rows, nope[l].to(device), rope[l].to(device))
        value = float(step + 1)
        state.temporal[:, slots.translate_kv_loc(slot)] = value
        live.append((tokens, nope, rope, slot, value))
        return True

    for step in range(60):
        if live and rng.random() < 0.4 or not add(step) and live:
            free(live.pop(rng.randrange(len(live))))
    while len(live) < 3:
        assert add(len(live) + 100)
    # The oldest request sits farthest from both frontiers: freeing it leaves holes that the
    # flushes fill with the newer ones.
    free(live.pop(0))
    alloc.flush_opportunistic()
    for side in (alloc.full_attn_allocator, slots):
        side._flush(urgent=True)
    full_moved = alloc.full_attn_allocator.counters()["pages_moved"]
    moved = full_moved + slots.counters()["pages_moved"]
    assert moved > 0, "nothing moved: the test proves nothing"
    if mover == "engine":
        assert (alloc.get_kvcache().full_kv_pool.moves > 0) == (full_moved > 0)
    for tokens, nope, rope, slot, value in live:
        rows = alloc.translate_kv_loc_dense(tokens)
        for l in range(LAYERS):
            got_nope, got_rope = kv.get_mla_kv_buffer(layer(l), rows)
            assert torch.equal(got_nope.cpu(), nope[l]) and torch.equal(got_rope.cpu(), rope[l])
        assert bool((state.temporal[:, slots.translate_kv_loc(slot)] == value).all())
    alloc.check_invariants()


@pytest.mark.parametrize("page_size", [1, 4])
def test_translate_kv_loc_dense_conventions(device, page_size):
    ps = page_size
    pool = kimi_pool(device, ps)
    full = MultiEndedAllocator(
        kvcache=None,
        unified_buffer=pool,
        sub_pool_name="full",
        device=device,
        is_id_owner=True,
        page_size=ps,
        kernel_page_multiplier=LAYERS,
    )
    mamba = MultiEndedAllocator(
        kvcache=None, unified_buffer=pool, sub_pool_name="mamba", device=device, is_id_owner=True
    )
    full.bind_peer(mamba)
    assert full.kernel_page_multiplier == LAYERS
    v = full.alloc(3 * ps)
    phys = full.translate_kv_loc(v)
    expected = dense(phys, ps)
    assert torch.equal(full.translate_kv_loc_dense(v), expected)
    # out= is written and returned, also in place; int32 ids are read as such.
    out = torch.empty_like(v)
    assert full.translate_kv_loc_dense(v, out=out) is out and torch.equal(out, expected)
    x = v.clone()
    full.translate_kv_loc_dense(x, out=x)
    assert torch.equal(x, expected)
    assert torch.equal(full.translate_kv_loc_dense(v.to(torch.int32)), expected)
    # A wrong out= is refused and left as it was.
    bad = torch.full(v.shape, 7, dtype=torch.int32, device=device)
    with pytest.raises(AssertionError, match="dtype"):
        full.translate_kv_loc_dense(v, out=bad)
    assert bool((bad == 7).all())
    # Tombstones and padding clamp to 0 (page 0 of every layer's view: the sink).
    gone = v[:ps].clone()
    full.free(gone.cpu())
    padding = torch.tensor([-1], dtype=torch.int64, device=device)
    assert not bool(full.translate_kv_loc_dense(torch.cat([gone, padding])).any())
    # Multiplier 1 is the physical translate.
    full.kernel_page_multiplier = 1
    assert torch.equal(full.translate_kv_loc_dense(v[ps:]), full.translate_kv_loc(v[ps:]))
    with pytest.raises(AssertionError, match="kernel_page_multiplier"):
        full.kernel_page_multiplier = 0
    assert full.kernel_page_multiplier == 1


def test_bad_multiplier_creates_nothing(device):
    pool = kimi_pool(device, 1)
    with pytest.raises(AssertionError, match="kernel_page_multiplier"):
        MultiEndedAllocator(
            kvcache=None,
            unified_buffer=pool,
            sub_pool_name="full",
            device=device,
            is_id_owner=True,
            kernel_page_multiplier=0,
        )
    # The sub-pool is still free to take its allocator.
    full = MultiEndedAllocator(
        kvcache=None, unified_buffer=pool, sub_pool_name="full", device=device, is_id_owner=True
    )
    assert full.alloc(2) is not None


def test_composite_surface(device):
    ps = 4
    _, _, _, alloc = kimi_stack(device, ps, lazy=True)
    assert alloc.kernel_page_multiplier == LAYERS
    v = alloc.alloc(2 * ps)
    table = alloc.full_v2p_page_table
    assert table.data_ptr() == alloc.full_attn_allocator.virtual_to_physical.data_ptr()
    # What the paged MLA kernels do with the table: dense page = v2p[virtual page] * layers.
    pages = table[v // ps] * ps * LAYERS + v % ps
    assert torch.equal(alloc.translate_kv_loc_dense(v), pages)
