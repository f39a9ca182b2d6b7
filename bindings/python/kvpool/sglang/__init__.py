"""Drop-in replacements for SGLang's unified-memory-pool classes, backed by kvpool.

An engine changes its imports from ``sglang.srt.mem_cache.*`` to ``kvpool.sglang``;
constructor keywords, method names, argument order, dtypes, return conventions
(None when there is no room) and the public attributes are the reference's.
Where the reference asserts, kvpool raises a KVPoolAssertionError (an
AssertionError). The differences are listed in kvpool's README.
"""

from .kv_pools import (
    KVWriteLoc,
    UnifiedHybridLinearKVPool,
    UnifiedMambaPool,
    UnifiedMHATokenToKVPool,
    UnifiedSWAKVPool,
    move_kv_cache_native,
    unwrap_write_loc,
)
from .mamba_allocator import UnifiedMambaSlotAllocator, UnifiedMambaTokenToKVPoolAllocator
from .mamba_swa_allocator import UnifiedMambaSWATokenToKVPoolAllocator
from .mla_pool import UnifiedMLATokenToKVPool
from .multi_ended_allocator import MultiEndedAllocator
from .page_major import (
    build_dense_mla_views,
    build_page_major_mamba_views,
    mamba_entry_bytes,
    mla_entry_bytes,
)
from .req_to_token_pool import HybridReqToTokenPool, ReqToTokenPool, UnifiedHybridReqToTokenPool
from .specs import MambaSubPoolSpec, MHASubPoolSpec, MLASubPoolSpec, SubPoolSpec
from .swa_allocator import UnifiedSWATokenToKVPoolAllocator
from .unified_kv_pool import UnifiedKVPool

__all__ = [
    "build_dense_mla_views",
    "build_page_major_mamba_views",
    "HybridReqToTokenPool",
    "KVWriteLoc",
    "mamba_entry_bytes",
    "MambaSubPoolSpec",
    "MHASubPoolSpec",
    "mla_entry_bytes",
    "MLASubPoolSpec",
    "MultiEndedAllocator",
    "ReqToTokenPool",
    "SubPoolSpec",
    "UnifiedHybridLinearKVPool",
    "UnifiedHybridReqToTokenPool",
    "UnifiedKVPool",
    "UnifiedMambaPool",
    "UnifiedMambaSlotAllocator",
    "UnifiedMambaSWATokenToKVPoolAllocator",
    "UnifiedMambaTokenToKVPoolAllocator",
    "UnifiedMHATokenToKVPool",
    "UnifiedMLATokenToKVPool",
    "UnifiedSWAKVPool",
    "UnifiedSWATokenToKVPoolAllocator",
    "move_kv_cache_native",
    "unwrap_write_loc",
]
