"""Handles live as long as anything uses them: exported tensors keep their owner,
and nothing leaks once the engine drops everything."""

import gc
import os
import subprocess
import sys

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


EXIT_WITH_LIVE_OBJECTS = """
import torch, kvpool
from kvpool.sglang import UnifiedSWATokenToKVPoolAllocator
from support import swa_pool

device = "cuda" if kvpool.backend() == "cuda" else "cpu"
pool = swa_pool(device, 4)
allocator = UnifiedSWATokenToKVPoolAllocator(unified_buffer=pool, kvcache=None, device=device,
    full_max_total_num_tokens=1000, swa_max_total_num_tokens=1000, page_size=4)
ids = allocator.alloc(8)
cycle = [allocator]
cycle.append(cycle)  # kept alive past interpreter teardown
print("allocated", int(ids.numel()))
"""


def test_exit_with_live_objects_is_clean():
    """An engine that exits holding kvpool objects: Kokkos is finalised at process exit,
    with no crash and nothing on stderr (Kokkos reports a missing finalize on CUDA)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", EXIT_WITH_LIVE_OBJECTS],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "allocated 8"
    assert done.stderr == ""
