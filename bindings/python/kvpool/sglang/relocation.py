"""The reference's kvcache protocol for page relocations.

When compaction moves pages (inside ``free`` in eager mode, inside the flushes
in lazy mode), the reference calls ``kvcache.move_kv_cache(dst_loc, src_loc)``
with int64 physical token ids on the device, destination first, before it
remaps the tables, falling back to ``kvcache._copy_from_physical(src, dst)``.
kvpool does the same through a move callback, synchronously inside the same
calls. A kvcache that is kvpool's own page-major pool over the same sub-pool
(or no kvcache at all) needs no callback: kvpool moves the pages' bytes inside
the unified buffer itself, one contiguous copy per page (the fast path).
"""

import torch

from ..errors import KVPoolAssertionError


def is_page_major_view(kvcache, unified_buffer, sub_pool_name):
    view_of = getattr(kvcache, "kvpool_page_major_side", None)
    if view_of is None:
        return False
    buffer, name = view_of()
    return buffer is unified_buffer and name == sub_pool_name


class TokenMover:
    """A side's move callback calling the engine's kvcache with physical token ids."""

    def __init__(self, kvcache, sub_pool_name, page_size, device):
        self.kvcache = kvcache
        self.sub_pool_name = sub_pool_name
        self.page_size = page_size
        self.device = device
        self.offsets = torch.arange(page_size, dtype=torch.int64, device=device)

    def tokens(self, pages):
        # pages: host memory kvpool reuses after the call; the tensor made here is the engine's.
        if self.device.type == "cuda":
            t = torch.from_numpy(pages).to(self.device, non_blocking=True)
        else:
            t = torch.from_numpy(pages.copy())
        if self.page_size == 1:
            return t
        return (t[:, None] * self.page_size + self.offsets).reshape(-1)

    def __call__(self, src_pages, dst_pages):
        src, dst = self.tokens(src_pages), self.tokens(dst_pages)
        move = getattr(self.kvcache, "move_kv_cache", None)
        if move is not None:
            move(dst, src)
            return
        copy = getattr(self.kvcache, "_copy_from_physical", None)
        if copy is None:
            raise KVPoolAssertionError(
                f"sub-pool {self.sub_pool_name!r} supports neither move_kv_cache nor _copy_from_physical"
            )
        copy(src, dst)


def install(side, kvcache, unified_buffer, sub_pool_name, page_size, device):
    """Installs the move callback kvcache needs on side; returns "kvpool" or "kvcache"."""
    if kvcache is None or is_page_major_view(kvcache, unified_buffer, sub_pool_name):
        side.set_move_callback(None)
        return "kvpool"
    side.set_move_callback(TokenMover(kvcache, sub_pool_name, page_size, device))
    return "kvcache"
