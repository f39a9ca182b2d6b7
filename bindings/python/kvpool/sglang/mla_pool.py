"""UnifiedMLATokenToKVPool: an MLA sub-pool of a UnifiedKVPool, read and written through
dense per-layer views (``page_major.build_dense_mla_views``).

Locations: every id the KV calls take (set_kv_buffer, set_mla_kv_buffer, get_mla_kv_buffer,
and the rows attention kernels read through get_key_buffer / get_value_buffer) is a dense id,
``translate_kv_loc_dense``'s output. The one exception is move_kv_cache, which takes physical
token ids in whole-page runs, as compaction hands them out, and moves whole pages.
An allocator whose kvcache is this pool moves the pages itself (kvpool's page move, one
contiguous copy per page), without calling move_kv_cache.
"""

from typing import List, Optional, Tuple

import torch

from ..errors import InvalidArgumentError
from .specs import _require

# What a KV dtype is stored as: the 8-bit floats as bytes, as in the reference.
_BYTE_STORED = tuple(
    getattr(torch, name) for name in ("float8_e5m2", "float8_e4m3fn") if hasattr(torch, name)
)


def store_dtype_for(kv_cache_dtype: torch.dtype) -> torch.dtype:
    return torch.uint8 if kv_cache_dtype in _BYTE_STORED else kv_cache_dtype


class UnifiedMLATokenToKVPool:
    def __init__(
        self,
        *,
        unified_buffer,
        sub_pool_name: str,
        kv_cache_dtype: torch.dtype,
        page_size: int = 1,
    ):
        spec = unified_buffer.mla_spec(sub_pool_name)
        store_dtype = store_dtype_for(kv_cache_dtype)
        _require(
            spec.store_dtype == store_dtype,
            f"sub-pool {sub_pool_name!r} stores {spec.store_dtype}, the KV cache dtype "
            f"{kv_cache_dtype} is stored as {store_dtype}",
        )
        views = unified_buffer.mla_views_for(sub_pool_name)
        self.unified_buffer = unified_buffer
        self.sub_pool_name = sub_pool_name
        self.page_size = page_size
        self.dtype = kv_cache_dtype
        self.store_dtype = store_dtype
        self.kv_lora_rank = spec.kv_lora_rank
        self.qk_rope_head_dim = spec.qk_rope_head_dim
        self.kv_cache_dim = spec.kv_cache_dim
        self.layer_num = spec.layer_num
        self.start_layer = 0
        self.end_layer = self.layer_num - 1
        self.device = unified_buffer.device
        self.kv_buffer: List[torch.Tensor] = views
        self._num_pages = unified_buffer.max_slots(sub_pool_name) // page_size
        self._page_bytes = spec.page_bytes(page_size)
        # Dense rows per view; page 0 of the dense space is the padding sink, as in the
        # reference (whose bounds checks allow ids below size + page_size).
        self.size = views[0].shape[0] - page_size

    def kvpool_page_major_side(self):
        """(unified buffer, sub-pool) whose pages these views are."""
        return self.unified_buffer, self.sub_pool_name

    # -- reads --
    def _layer(self, layer_id: int) -> torch.Tensor:
        return self.kv_buffer[layer_id - self.start_layer]

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        buf = self._layer(layer_id)
        return buf.view(self.dtype) if self.store_dtype != self.dtype else buf

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        """The key rows' first kv_lora_rank elements: V shares K's storage."""
        buf = self._layer(layer_id)[..., : self.kv_lora_rank]
        return buf.view(self.dtype) if self.store_dtype != self.dtype else buf

    def get_kv_buffer(self, layer_id: int) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def get_mla_kv_buffer(self, layer, loc: torch.Tensor, dst_dtype: Optional[torch.dtype] = None):
        """(k_nope, k_rope) of these dense ids, ``(n, 1, kv_lora_rank)`` and
        ``(n, 1, qk_rope_head_dim)``, as dst_dtype (the KV dtype when None)."""
        rows = self.get_key_buffer(layer.layer_id)[loc.reshape(-1).to(torch.int64)]
        dst_dtype = dst_dtype or self.dtype
        return (
            rows[..., : self.kv_lora_rank].to(dst_dtype),
            rows[..., self.kv_lora_rank :].to(dst_dtype),
        )

    # -- writes --
    def _stored(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.dtype:
            x = x.to(self.dtype)
        return x.view(self.store_dtype) if self.store_dtype != self.dtype else x

    def set_kv_buffer(self, layer, loc: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor):
        """Writes the latent rows cache_k (``(n, 1, kv_cache_dim)``) at these dense ids; cache_v
        is not stored (V is K's prefix)."""
        self._layer(layer.layer_id)[loc.reshape(-1).to(torch.int64)] = self._stored(
            cache_k.reshape(-1, 1, self.kv_cache_dim)
        )

    def set_mla_kv_buffer(
        self, layer, loc: torch.Tensor, cache_k_nope: torch.Tensor, cache_k_rope: torch.Tensor
    ):
        rows = loc.reshape(-1).to(torch.int64)
        buf = self._layer(layer.layer_id)
        buf[rows, :, : self.kv_lora_rank] = self._stored(
            cache_k_nope.reshape(-1, 1, self.kv_lora_rank)
        )
        buf[rows, :, self.kv_lora_rank :] = self._stored(
            cache_k_rope.reshape(-1, 1, self.qk_rope_head_dim)
        )

    # -- relocation and transfer --
    def _pages(self) -> torch.Tensor:
        raw = self.unified_buffer._raw
        return raw[: self._num_pages * self._page_bytes].view(self._num_pages, self._page_bytes)

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor):
        """Moves whole pages: tgt_loc / src_loc are physical token ids in runs of page_size
        (``pages[:, None] * page_size + arange(page_size)``), what compaction hands out."""
        if tgt_loc.numel() != src_loc.numel() or tgt_loc.numel() % self.page_size:
            raise InvalidArgumentError(
                f"move_kv_cache: {tgt_loc.numel()} target and {src_loc.numel()} source tokens, "
                f"not equal runs of page_size {self.page_size}"
            )
        if tgt_loc.numel() == 0:
            return
        ps = self.page_size
        tgt_pages = tgt_loc.reshape(-1, ps)[:, 0].to(torch.int64) // ps
        src_pages = src_loc.reshape(-1, ps)[:, 0].to(torch.int64) // ps
        pages = self._pages()
        pages[tgt_pages] = pages[src_pages]

    def get_kv_size_bytes(self):
        return 0  # the UnifiedKVPool holds the bytes; counting them here would count them twice

    def get_contiguous_buf_infos(self):
        """What a transfer engine registers: the whole buffer, one item per page, physical
        page p at ``ptr + p * page_bytes`` (all layers of its tokens: one contiguous copy).
        Both ends must build the pool with the same specs and page size."""
        raw = self.unified_buffer._raw
        return [raw.data_ptr()], [raw.numel()], [self._page_bytes]
