"""Handles live as long as anything uses them: exported tensors keep their owner,
and nothing leaks once the engine drops everything."""

import gc

import torch

from kvpool import native
from kvpool.sglang import (
    HybridReqToTokenPool,
    UnifiedMambaTokenToKVPoolAllocator,
    UnifiedSWATokenToKVPoolAllocator,
)
from support import mamba_pool, swa_pool


def test_views_outlive_the_allocator_and_nothing_leaks(device):
    gc.collect()
    baseline = native.live_handles()
    pool = swa_pool(device, 4)
    a = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=None,
        device=device,
        full_max_total_num_tokens=1000,
        swa_max_total_num_tokens=1000,
        page_size=4,
    )
    ids = a.alloc(8)
    v2p = a.full_attn_allocator.virtual_to_physical
    raw = pool._raw
    del a, pool
    gc.collect()
    assert native.live_handles() > baseline  # the views keep the pair and the buffer
    assert (v2p[ids // 4] > 0).all() and raw.numel() > 0
    del v2p, raw
    gc.collect()
    assert native.live_handles() == baseline


def test_hybrid_tables_release_everything(device):
    gc.collect()
    baseline = native.live_handles()
    pool = mamba_pool(device, 1)
    a = UnifiedMambaTokenToKVPoolAllocator(unified_buffer=pool, kvcache=None, device=device)
    reqs = HybridReqToTokenPool(
        size=4, max_context_len=8, device=device, mamba_allocator=a.mamba_allocator
    )
    table = reqs.req_to_token
    assert table.shape == (5, 8) and table.dtype == torch.int64
    del a, pool, reqs, table
    gc.collect()
    assert native.live_handles() == baseline
