"""Test support: pools and KV stores of both kinds (kvpool's page-major views over
the unified buffer, and an engine's own per-token store moved through the
kvcache protocol), stamps that follow each token, and the checks every test
ends with (invariants, inverse tables, data)."""

import gc
import random
from types import SimpleNamespace

import torch

from kvpool import native
from kvpool.sglang import (
    MambaSubPoolSpec,
    MHASubPoolSpec,
    UnifiedHybridLinearKVPool,
    UnifiedKVPool,
    UnifiedMambaPool,
    UnifiedMHATokenToKVPool,
    UnifiedSWAKVPool,
    UnifiedSWATokenToKVPoolAllocator,
)

HEADS, HEAD_DIM = 2, 4


def mha_spec(name, layers, grow, float_at=0.5):
    return MHASubPoolSpec(
        name=name,
        layer_num=layers,
        grow_direction=grow,
        float_at=float_at,
        head_num=HEADS,
        head_dim=HEAD_DIM,
        store_dtype=torch.bfloat16,
    )


def mamba_spec(name, layers, grow):
    return MambaSubPoolSpec(
        name=name,
        layer_num=layers,
        grow_direction=grow,
        conv_state_shapes=((4, 3),),
        conv_dtype=torch.bfloat16,
        temporal_state_shape=(2, 4, 4),
        temporal_dtype=torch.float32,
    )


def swa_pool(device, page_size, total_bytes=1 << 17):
    """A SWA pair's buffer: "full" (2 layers) grows up, "swa" (3 layers) grows down."""
    return UnifiedKVPool(
        total_bytes=total_bytes,
        sub_pool_specs=[mha_spec("full", 2, "up"), mha_spec("swa", 3, "down")],
        device=device,
        page_size=page_size,
    )


def swa_allocator(device, page_size, lazy=True, total_bytes=1 << 15):
    """An SWA pair over swa_pool(device, page_size, total_bytes), without a KV cache."""
    return UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=swa_pool(device, page_size, total_bytes),
        kvcache=None,
        device=device,
        full_max_total_num_tokens=10000,
        swa_max_total_num_tokens=10000,
        page_size=page_size,
        lazy_compaction=lazy,
    )


def mamba_pool(device, page_size, total_bytes=1 << 17):
    """A Mamba pair's buffer: "full" (2 layers) grows down, "mamba" state (2 layers) grows up."""
    return UnifiedKVPool(
        total_bytes=total_bytes,
        sub_pool_specs=[mha_spec("full", 2, "down"), mamba_spec("mamba", 2, "up")],
        device=device,
        page_size=page_size,
    )


def tri_pool(device, page_size, total_bytes=1 << 17, float_at=0.5):
    """A tri-pool's buffer, from the low end up: "mamba" state (2 layers) grows up, "swa"
    (3 layers) floats from float_at, "full" (2 layers) grows down."""
    return UnifiedKVPool(
        total_bytes=total_bytes,
        sub_pool_specs=[
            mamba_spec("mamba", 2, "up"),
            mha_spec("swa", 3, "floating", float_at),
            mha_spec("full", 2, "down"),
        ],
        device=device,
        page_size=page_size,
    )


class EngineKV:
    """An engine's own KV store of one sub-pool: one row per physical token, moved
    by the kvcache protocol. Records every move_kv_cache call."""

    def __init__(self, num_tokens, device):
        self.rows = torch.zeros(num_tokens, dtype=torch.int64, device=device)
        self.calls = []

    def move_kv_cache(self, tgt_loc, src_loc):
        assert tgt_loc.dtype == torch.int64 and src_loc.dtype == torch.int64
        assert tgt_loc.device == self.rows.device and tgt_loc.shape == src_loc.shape
        self.calls.append((tgt_loc.clone(), src_loc.clone()))
        self.rows[tgt_loc] = self.rows[src_loc]

    def write(self, physical, stamps):
        self.rows[physical] = stamps

    def read(self, physical):
        return self.rows[physical][:, None]

    def expected(self, stamps):
        return stamps[:, None]


class EngineStateKV(EngineKV):
    """An engine store offering only the fallback, _copy_from_physical(src, dst)."""

    move_kv_cache = None

    def _copy_from_physical(self, src, dst):
        self.calls.append((dst.clone(), src.clone()))
        self.rows[dst] = self.rows[src]


def _rows(stamps, salt):
    return (stamps * salt) % 30011


class PageMajorStore:
    """Stamps in kvpool's page-major views: every layer's K and V rows of a token."""

    def __init__(self, kv_pool):
        self.pool = kv_pool
        self.ps = int(kv_pool.k_buffer[0].shape[1])  # the views' page size
        self.layers = len(kv_pool.k_buffer)

    def write(self, physical, stamps):
        page, slot = physical // self.ps, physical % self.ps
        for layer, (k, v) in enumerate(zip(self.pool.k_buffer, self.pool.v_buffer)):
            k.view(torch.int16)[page, slot] = _rows(stamps, 13 + layer).to(torch.int16)[
                :, None, None
            ]
            v.view(torch.int16)[page, slot] = _rows(stamps, 31 + layer).to(torch.int16)[
                :, None, None
            ]

    def read(self, physical):
        page, slot = physical // self.ps, physical % self.ps
        parts = []
        for k, v in zip(self.pool.k_buffer, self.pool.v_buffer):
            parts.append(k.view(torch.int16)[page, slot].reshape(len(physical), -1))
            parts.append(v.view(torch.int16)[page, slot].reshape(len(physical), -1))
        return torch.cat(parts, 1).to(torch.int64)

    def expected(self, stamps):
        per_row = HEADS * HEAD_DIM
        parts = []
        for layer in range(self.layers):
            parts.append(_rows(stamps, 13 + layer)[:, None].expand(-1, per_row))
            parts.append(_rows(stamps, 31 + layer)[:, None].expand(-1, per_row))
        return torch.cat(parts, 1)


class MambaStore:
    """Stamps in kvpool's Mamba state views: every conv and temporal element of a slot."""

    def __init__(self, state_pool):
        self.pool = state_pool

    def write(self, physical, stamps):
        for conv in self.pool.conv:
            conv.view(torch.int16)[:, physical] = _rows(stamps, 7).to(torch.int16).view(1, -1, 1, 1)
        self.pool.temporal.view(torch.int32)[:, physical] = stamps.to(torch.int32).view(
            1, -1, 1, 1, 1
        )

    def read(self, physical):
        n = len(physical)
        conv = [
            c.view(torch.int16)[:, physical].transpose(0, 1).reshape(n, -1) for c in self.pool.conv
        ]
        temporal = self.pool.temporal.view(torch.int32)[:, physical].transpose(0, 1).reshape(n, -1)
        return torch.cat(conv + [temporal], 1).to(torch.int64)

    def expected(self, stamps):
        n = len(stamps)
        conv = [_rows(stamps, 7)[:, None].expand(n, c[:, 0].numel()) for c in self.pool.conv]
        return torch.cat(conv + [stamps[:, None].expand(n, self.pool.temporal[:, 0].numel())], 1)


class Stamped:
    """Which stamp each live virtual token carries in one sub-pool's store."""

    def __init__(self, allocator, store, engine_store=False):
        self.allocator = allocator
        self.store = store
        self.engine_store = engine_store
        self.stamps = {}  # virtual token -> stamp

    def stamp(self, tokens, rng):
        if len(tokens) == 0:
            return
        virt = torch.as_tensor(tokens, dtype=torch.int64, device=self.allocator.device)
        stamps = torch.tensor(
            [rng.randrange(1, 1 << 30) for _ in tokens],
            dtype=torch.int64,
            device=self.allocator.device,
        )
        self.store.write(self.allocator.translate_kv_loc(virt), stamps)
        for t, s in zip(virt.tolist(), stamps.tolist()):
            self.stamps[t] = s

    def forget(self, tokens):
        for t in tokens:
            self.stamps.pop(int(t), None)

    def check(self, what=""):
        if not self.stamps:
            return
        virt = torch.tensor(list(self.stamps), dtype=torch.int64, device=self.allocator.device)
        want = torch.tensor(
            list(self.stamps.values()), dtype=torch.int64, device=self.allocator.device
        )
        got = self.store.read(self.allocator.translate_kv_loc(virt))
        bad = (got != self.store.expected(want)).any(1).nonzero().flatten().tolist()
        assert not bad, (
            f"{what}: KV data of virtual tokens {[int(virt[i]) for i in bad[:8]]} not found "
            f"through translate_kv_loc ({self.allocator.sub_pool_name})"
        )


def check_tables(allocator, live_tokens):
    """v2p and p2v are inverse on the live pages, -1 elsewhere but the anchor and the sentinel."""
    ps = allocator.page_size
    v2p = allocator.virtual_to_physical.cpu()
    p2v = allocator.physical_to_virtual.cpu()
    assert v2p[0] == 0 and p2v[0] == 0 and v2p[-1] == -1 and p2v[-1] == -1
    pages = torch.unique(torch.tensor(list(live_tokens), dtype=torch.int64) // ps)
    physical = v2p[pages]
    assert (
        physical >= allocator.min_page_index
    ).all(), "a live virtual page is unbound or in the sink"
    assert torch.equal(p2v[physical], pages), "p2v is not the inverse of v2p on the live pages"
    assert int((v2p[1:-1] >= 0).sum()) == len(pages), "bound virtual pages other than the live ones"
    assert int((p2v[1:-1] >= 0).sum()) == len(
        pages
    ), "bound physical pages other than the live ones"


def check_all(allocator, live_tokens, stamped, what=""):
    allocator.check_invariants()
    check_tables(allocator, live_tokens)
    stamped.check(what)


def swa_stores(
    kind, pool, allocator_full_pages, allocator_swa_pages, page_size, device, swa_page_size=None
):
    """(kvcache for the SWA composite, full store, swa store) of one kind:
    "unified" (kvpool's page-major views: the fast path), "engine" (the kvcache protocol).
    swa_page_size: the SWA side's own page size (None: page_size)."""
    if kind == "unified":
        kv = UnifiedSWAKVPool(
            unified_buffer=pool,
            swa_attention_layer_ids=[1, 2, 3],
            full_attention_layer_ids=[0, 4],
            page_size=page_size,
            swa_page_size=swa_page_size,
        )
        return kv, PageMajorStore(kv.full_kv_pool), PageMajorStore(kv.swa_kv_pool)
    full = EngineKV(allocator_full_pages * page_size, device)
    swa = EngineKV(allocator_swa_pages * (swa_page_size or page_size), device)

    class EngineSWA:
        full_kv_pool, swa_kv_pool = full, swa
        attached = None

        def attach_allocators(self, *, full_allocator, swa_allocator):
            EngineSWA.attached = (full_allocator, swa_allocator)

    return EngineSWA(), full, swa


def mamba_stores(kind, pool, page_size, device):
    """(kvcache for the Mamba composite, full store, state store)."""
    if kind == "unified":
        full = UnifiedMHATokenToKVPool(
            unified_buffer=pool, sub_pool_name="full", page_size=page_size
        )
        state = UnifiedMambaPool(unified_buffer=pool, sub_pool_name="mamba")
        return (
            UnifiedHybridLinearKVPool(full_kv_pool=full, mamba_pool=state),
            PageMajorStore(full),
            MambaStore(state),
        )
    full_pages = pool.max_slots("full") // page_size
    full = EngineKV(full_pages * page_size, device)
    state = EngineStateKV(pool.max_slots("mamba"), device)
    return UnifiedHybridLinearKVPool(full_kv_pool=full, mamba_pool=state), full, state


def tri_pool_stores(kind, pool, page_size, device, swa_page_size=None):
    """(kvcache for the tri-pool composite, full store, swa store, state store), of the
    kinds swa_stores makes. swa_page_size: the SWA side's own page size (None: page_size),
    which lays out the SWA views."""
    swa_ps = swa_page_size or page_size
    if kind == "unified":
        full = UnifiedMHATokenToKVPool(
            unified_buffer=pool, sub_pool_name="full", page_size=page_size
        )
        swa = UnifiedMHATokenToKVPool(
            unified_buffer=pool, sub_pool_name="swa", page_size=swa_ps, view_page_size=swa_ps
        )
        state = UnifiedMambaPool(unified_buffer=pool, sub_pool_name="mamba")
        kvcache = SimpleNamespace(full_kv_pool=full, swa_kv_pool=swa, mamba_pool=state)
        return kvcache, PageMajorStore(full), PageMajorStore(swa), MambaStore(state)
    full = EngineKV(pool.max_slots("full") // page_size * page_size, device)
    swa = EngineKV(pool.max_slots("swa") // swa_ps * swa_ps, device)
    state = EngineStateKV(pool.max_slots("mamba"), device)
    kvcache = SimpleNamespace(full_kv_pool=full, swa_kv_pool=swa, mamba_pool=state)
    return kvcache, full, swa, state


class FakeEvent:
    """A forward-done marker the test completes by hand, or that completes after being
    asked `polls` times (a GPU build waits for a marker that is not an event by polling it)."""

    def __init__(self, done=False, polls=None):
        self.done = done
        self.polls = polls

    def query(self):
        if not self.done and self.polls is not None:
            self.polls -= 1
            self.done = self.polls < 0
        return self.done


def rng_for(seed):
    return random.Random(seed)


def unbound_pool_state(pool):
    """What a refused construction over pool must leave as it was: the live native handles,
    the pool's native buffer and whether its layout is fixed."""
    gc.collect()
    return native.live_handles(), pool._native, pool._layout_fixed
