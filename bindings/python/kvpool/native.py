"""kvpool's own Python API: thin objects over the C API handles.

Every device call runs on torch's current stream of the object's device and
never synchronises with it. ``kvpool.sglang`` builds the SGLang-compatible
classes on these.

The classes live in kvpool._native, one module per subject (handle, pool, kv, allocator,
composites, requests); this module is their one public name space.
"""

# The public names, re-exported (F401): the classes, allocator_options, EvictionShortfall and,
# from kvpool.transfer, the PD transfer descriptors over a MultiEndedAllocator.
from ._lib import lib
from ._native.allocator import (  # noqa: F401
    MambaStateViews,
    MultiEndedAllocator,
    allocator_options,
    set_forward_done,
)
from ._native.composites import (  # noqa: F401
    EvictionShortfall,
    UnifiedMambaAllocator,
    UnifiedMambaSWAAllocator,
    UnifiedSWAAllocator,
)
from ._native.pool import UnifiedKVPool
from ._native.requests import HybridReqToTokenPool, ReqToTokenPool
from .transfer import (  # noqa: F401
    SubPoolTransferLayout,
    TransferDescriptor,
    copy_runs,
    describe_transfer,
    pair_layer,
    pair_pages,
    pair_runs,
)


def live_handles():
    return lib.kvpool_live_handles()


__all__ = [
    "UnifiedKVPool",
    "MultiEndedAllocator",
    "MambaStateViews",
    "UnifiedSWAAllocator",
    "UnifiedMambaAllocator",
    "UnifiedMambaSWAAllocator",
    "ReqToTokenPool",
    "HybridReqToTokenPool",
    "set_forward_done",
    "live_handles",
]
