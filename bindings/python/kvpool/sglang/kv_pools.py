"""KV caches over a UnifiedKVPool's page-major views, in the reference's shapes.

An allocator whose ``kvcache`` is one of these (or None) relocates pages with
kvpool's own page move inside the unified buffer: one contiguous copy per
page, no Python on the way. Their ``move_kv_cache`` is there for engine code
that moves tokens itself.
"""

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

from ..errors import InvalidArgumentError, KVPoolAssertionError
from ..transfer import SubPoolTransferLayout
from .swa_pages import swa_page_size_of


@dataclass
class KVWriteLoc:
    """Where ``set_kv_buffer`` writes, as the reference's attention metadata carries it:
    ``loc`` the allocated (virtual, under a unified pool) token ids, ``swa_loc`` and
    ``full_loc`` the SWA and full sub-pools' physical token ids, translated once per
    forward (None where there are none). The pools never translate."""

    loc: torch.Tensor
    swa_loc: Optional[torch.Tensor] = None
    full_loc: Optional[torch.Tensor] = None

    def __post_init__(self):
        # Resolved once from the padded out_cache_loc; a narrowed loc narrows them alike.
        if self.swa_loc is not None and self.swa_loc.shape[0] != self.loc.shape[0]:
            self.swa_loc = self.swa_loc[: self.loc.shape[0]]
        if self.full_loc is not None and self.full_loc.shape[0] != self.loc.shape[0]:
            self.full_loc = self.full_loc[: self.loc.shape[0]]


def unwrap_write_loc(loc_info):
    """``(loc, swa_loc, full_loc)`` of a KVWriteLoc (kvpool's or SGLang's: anything with
    those three attributes), or ``(loc_info, None, None)`` of bare ids."""
    if isinstance(loc_info, torch.Tensor) or not hasattr(loc_info, "full_loc"):
        return loc_info, None, None
    return loc_info.loc, loc_info.swa_loc, loc_info.full_loc


def move_kv_cache_native(k_buffer, v_buffer, tgt_loc, src_loc, page_size: int = 1):
    """The reference's token move over per-layer K/V buffers: 4-D page-major views
    ``(num_pages, page_size, heads, dim)`` (token id -> page, slot in page), or 3-D
    ``(tokens, heads, dim)`` buffers (page_size ignored). Physical token ids."""
    if tgt_loc.numel() == 0:
        return
    tgt = tgt_loc.reshape(-1).to(torch.int64)
    src = src_loc.reshape(-1).to(torch.int64)
    for k, v in zip(k_buffer, v_buffer):
        if k.ndim == 4:
            tp, ts = tgt // page_size, tgt % page_size
            sp, ss = src // page_size, src % page_size
            k[tp, ts] = k[sp, ss]
            v[tp, ts] = v[sp, ss]
        else:
            k[tgt] = k[src]
            v[tgt] = v[src]


class UnifiedMHATokenToKVPool:
    """MHA K/V of one sub-pool: per layer, views ``(num_pages, page_size, head_num, head_dim)``
    shaped by the UnifiedKVPool's page_size, or by ``view_page_size`` (kvpool's addition: a
    divisor of it, for a side that pages finer, the SWA side's own page size). Locations are
    physical token ids, addressed through the views' page size (an allocator page is whole
    view pages)."""

    def __init__(
        self,
        *,
        unified_buffer,
        sub_pool_name: str,
        page_size: int = 1,
        start_layer: Optional[int] = None,
        end_layer: Optional[int] = None,
        view_page_size: Optional[int] = None,
        **_ignored,
    ):
        spec = unified_buffer.mha_spec(sub_pool_name)
        self.unified_buffer = unified_buffer
        self.sub_pool_name = sub_pool_name
        self.page_size = page_size
        self.dtype = self.store_dtype = spec.store_dtype
        self.head_num, self.head_dim, self.v_head_dim = (
            spec.head_num,
            spec.head_dim,
            spec.v_head_dim,
        )
        self.layer_num = spec.layer_num
        self.start_layer = start_layer or 0
        self.end_layer = (
            end_layer if end_layer is not None else self.start_layer + self.layer_num - 1
        )
        self.size = unified_buffer.max_slots(sub_pool_name) - 1
        self.device = unified_buffer.device
        self.k_buffer, self.v_buffer = unified_buffer.mha_views_for(sub_pool_name, view_page_size)
        self._view_page_size = int(self.k_buffer[0].shape[1])

    def kvpool_page_major_side(self):
        """(unified buffer, sub-pool) this pool's bytes are the pages of."""
        return self.unified_buffer, self.sub_pool_name

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.k_buffer[layer_id - self.start_layer]

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.v_buffer[layer_id - self.start_layer]

    def get_kv_buffer(self, layer_id: int) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def _split(self, loc):
        loc = loc.reshape(-1).to(torch.int64)
        return loc // self._view_page_size, loc % self._view_page_size

    def set_kv_buffer(
        self,
        layer,
        loc: torch.Tensor,
        cache_k: torch.Tensor,
        cache_v: torch.Tensor,
        k_scale=None,
        v_scale=None,
        layer_id_override: Optional[int] = None,
        **_ignored,
    ):
        layer_id = (
            layer.layer_id if layer_id_override is None else layer_id_override
        ) - self.start_layer
        page, slot = self._split(loc)
        k, v = self.k_buffer[layer_id], self.v_buffer[layer_id]
        k[page, slot] = cache_k.reshape(-1, self.head_num, self.head_dim).to(self.dtype)
        v[page, slot] = cache_v.reshape(-1, self.head_num, self.v_head_dim).to(self.dtype)

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor):
        move_kv_cache_native(
            self.k_buffer, self.v_buffer, tgt_loc, src_loc, page_size=self._view_page_size
        )

    # -- disaggregation (PD) transfers: one whole-page envelope per view page --
    def get_contiguous_buf_infos(self):
        """What a transfer engine registers: the whole buffer, one item per page of the
        views, physical token t in the page at ``ptr + (t // page_size) * item`` (K and V of
        every layer: one contiguous copy). Both ends must build the pool with the same specs
        and page size."""
        raw = self.unified_buffer._raw
        spec = self.unified_buffer.mha_spec(self.sub_pool_name)
        return [raw.data_ptr()], [raw.numel()], [spec.page_bytes(self._view_page_size)]

    def transfer_layout(self) -> SubPoolTransferLayout:
        """The page as kvpool.transfer describes it: per layer, the K block then the V block
        (for transfers layer by layer, or between ends of other page sizes)."""
        spec = self.unified_buffer.mha_spec(self.sub_pool_name)
        return SubPoolTransferLayout.from_views(
            spec.view_descriptors(self._view_page_size), 2, view_page_size=self._view_page_size
        )


class UnifiedSWAKVPool:
    """The SWA pair's KV cache: ``full_kv_pool`` and ``swa_kv_pool`` over the sub-pools
    "full" and "swa" of one unified buffer; layers map to their pool by global id.
    ``swa_page_size`` (kvpool's addition; None: page_size): the SWA side's own page size, a
    divisor of page_size, which lays out the SWA pool's views; give the allocator the same."""

    def __init__(
        self,
        *,
        unified_buffer,
        swa_attention_layer_ids: List[int],
        full_attention_layer_ids: List[int],
        page_size: int = 1,
        start_layer: Optional[int] = None,
        end_layer: Optional[int] = None,
        swa_page_size: Optional[int] = None,
        **_ignored,
    ):
        swa_ps = swa_page_size_of(page_size, swa_page_size)
        self.unified_buffer = unified_buffer
        self.page_size = page_size
        self.swa_page_size = swa_ps
        self.full_kv_pool = UnifiedMHATokenToKVPool(
            unified_buffer=unified_buffer, sub_pool_name="full", page_size=page_size
        )
        self.swa_kv_pool = UnifiedMHATokenToKVPool(
            unified_buffer=unified_buffer,
            sub_pool_name="swa",
            page_size=swa_ps,
            # Views at a page dividing both the pool's and the SWA side's.
            view_page_size=math.gcd(swa_ps, unified_buffer._page_size),
        )
        self.layers_mapping: Dict[int, Tuple[int, bool]] = {}
        for idx, gid in enumerate(full_attention_layer_ids):
            self.layers_mapping[gid] = (idx, False)
        for idx, gid in enumerate(swa_attention_layer_ids):
            self.layers_mapping[gid] = (idx, True)
        self.size = self.full_kv_pool.size
        self.size_swa = self.swa_kv_pool.size
        self.device = unified_buffer.device
        self._full_allocator = None
        self._swa_allocator = None

    def attach_allocators(self, *, full_allocator, swa_allocator) -> None:
        self._full_allocator = full_allocator
        self._swa_allocator = swa_allocator

    def register_mapping(self, full_to_swa_index_mapping) -> None:
        return

    def translate_loc_from_full_to_swa(self, kv_indices: torch.Tensor) -> torch.Tensor:
        if self._swa_allocator is None:
            raise InvalidArgumentError(
                "translate_loc_from_full_to_swa called before attach_allocators"
            )
        out = torch.empty(kv_indices.shape, dtype=torch.int32, device=kv_indices.device)
        return self._swa_allocator._side.translate(kv_indices, out)

    def _pool_of(self, layer_id):
        idx, is_swa = self.layers_mapping[layer_id]
        return (self.swa_kv_pool if is_swa else self.full_kv_pool), idx

    def get_key_buffer(self, layer_id: int):
        pool, idx = self._pool_of(layer_id)
        return pool.k_buffer[idx]

    def get_value_buffer(self, layer_id: int):
        pool, idx = self._pool_of(layer_id)
        return pool.v_buffer[idx]

    def get_kv_buffer(self, layer_id: int):
        pool, idx = self._pool_of(layer_id)
        return pool.k_buffer[idx], pool.v_buffer[idx]

    def set_kv_buffer(self, layer, loc_info, cache_k, cache_v, k_scale=1.0, v_scale=1.0):
        """Writes a layer's K/V where the write metadata (a KVWriteLoc) says, as the
        reference: a SWA layer at ``swa_loc``, a full layer at ``full_loc``, both physical
        ids of their sub-pool, translated once per forward; the pool never translates, and
        a write without its sub-pool's ids is refused rather than written at virtual ids."""
        _, swa_loc, full_loc = unwrap_write_loc(loc_info)
        pool_layer_id, is_swa = self.layers_mapping[layer.layer_id]
        if is_swa:
            if swa_loc is None:
                raise KVPoolAssertionError(
                    "UnifiedSWAKVPool.set_kv_buffer: SWA layer received no swa_loc; the "
                    "attention backend must bundle the SWA-physical write locations"
                )
            self.swa_kv_pool.set_kv_buffer(
                None, swa_loc, cache_k, cache_v, k_scale, v_scale, layer_id_override=pool_layer_id
            )
            return
        if full_loc is None:
            raise KVPoolAssertionError(
                "UnifiedSWAKVPool.set_kv_buffer: full layer received no full_loc; the full "
                "sub-pool's physical write locations (out_cache_loc_full_physical) must be "
                "precomputed for the unified pool"
            )
        self.full_kv_pool.set_kv_buffer(
            None, full_loc, cache_k, cache_v, k_scale, v_scale, layer_id_override=pool_layer_id
        )

    # -- disaggregation (PD) transfers, as the reference's SWAKVPool: the full sub-pool's
    # KV, and the sliding window's as the request's "state" --
    def get_contiguous_buf_infos(self):
        return self.full_kv_pool.get_contiguous_buf_infos()

    def get_state_buf_infos(self):
        return self.swa_kv_pool.get_contiguous_buf_infos()

    @staticmethod
    def _virt_tokens_to_phys_tokens(virt_tokens: torch.Tensor, allocator) -> torch.Tensor:
        """Virtual token ids -> the allocator's physical token ids, through its v2p table
        (the reference's helper); unbound pages give negative ids."""
        ps = allocator.page_size
        v2p = allocator.virtual_to_physical
        if ps == 1:
            return v2p[virt_tokens]
        return v2p[virt_tokens // ps] * ps + virt_tokens % ps


class UnifiedMambaPool:
    """Mamba state of one sub-pool: ``conv`` views ``(layers, slots, *shape)`` and
    ``temporal``; state ops take physical slot ids."""

    def __init__(self, *, unified_buffer, sub_pool_name: str, **_ignored):
        spec = unified_buffer.mamba_spec(sub_pool_name)
        self.unified_buffer = unified_buffer
        self.sub_pool_name = sub_pool_name
        self.num_mamba_layers = spec.layer_num
        self.size = unified_buffer.max_slots(sub_pool_name) - 1
        self.device = unified_buffer.device
        self.conv, self.temporal = unified_buffer.mamba_views_for(sub_pool_name)

    def kvpool_page_major_side(self):
        return self.unified_buffer, self.sub_pool_name

    def mamba2_layer_cache(self, layer_id: int):
        return [c[layer_id] for c in self.conv], self.temporal[layer_id]

    def clear_slots(self, indices: torch.Tensor):
        for c in self.conv:
            c[:, indices] = 0
        self.temporal[:, indices] = 0

    def copy_from(self, src_indices: torch.Tensor, dst_indices: torch.Tensor):
        for c in self.conv:
            c[:, dst_indices] = c[:, src_indices]
        self.temporal[:, dst_indices] = self.temporal[:, src_indices]

    def _copy_from_physical(self, src_index: torch.Tensor, dst_index: torch.Tensor):
        self.copy_from(src_index, dst_index)

    # -- disaggregation (PD) transfers: a slot's state of every layer is one envelope --
    def get_contiguous_buf_infos(self):
        """What a transfer engine registers: the whole buffer, one item per state slot,
        physical slot s at ``ptr + s * entry_bytes`` (conv and temporal state of every layer:
        one contiguous copy). Both ends must build the pool with the same specs."""
        raw = self.unified_buffer._raw
        entry = self.unified_buffer.mamba_spec(self.sub_pool_name).entry_bytes()
        return [raw.data_ptr()], [raw.numel()], [entry]

    # An envelope cannot be resliced per tensor or layer: no per-tensor metadata.
    def get_state_dim_per_tensor(self):
        return []

    def get_state_layer_ids(self):
        return []

    def get_state_slice_outer_counts(self):
        return []

    def get_state_conv_shard_groups(self):
        return []


class UnifiedHybridLinearKVPool:
    """The Mamba pair's KV cache: ``full_kv_pool`` (MHA, or MLA: UnifiedMLATokenToKVPool) and
    ``mamba_pool`` (state)."""

    def __init__(self, *, full_kv_pool, mamba_pool, full_attention_layer_ids=None):
        """full_attention_layer_ids: the global ids of the full-attention layers, in the
        full pool's order (None: layer ids are the full pool's own)."""
        self.full_kv_pool = full_kv_pool
        self.mamba_pool = mamba_pool
        self.full_attention_layer_id_mapping = (
            None
            if full_attention_layer_ids is None
            else {gid: idx for idx, gid in enumerate(full_attention_layer_ids)}
        )

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, k_scale=1.0, v_scale=1.0, **kwargs):
        """Writes a full-attention layer's K/V, as the reference: at the write metadata's
        ``full_loc`` (a KVWriteLoc's full-physical ids, translated once per forward), else at
        ``loc`` itself (bare ids, already physical); the pool never translates."""
        loc, _, full_loc = unwrap_write_loc(loc)
        mapping = self.full_attention_layer_id_mapping
        self.full_kv_pool.set_kv_buffer(
            layer,
            full_loc if full_loc is not None else loc,
            cache_k,
            cache_v,
            k_scale,
            v_scale,
            layer_id_override=layer.layer_id if mapping is None else mapping[layer.layer_id],
            **kwargs,
        )

    # -- disaggregation (PD) transfers: whole envelopes, paired by position --
    def get_contiguous_buf_infos(self):
        return self.full_kv_pool.get_contiguous_buf_infos()

    def get_kv_layer_ids(self):
        """None: the KV is one whole-envelope entry, not one per layer."""
        return []

    def get_state_buf_infos(self):
        return self.mamba_pool.get_contiguous_buf_infos()

    def get_state_dim_per_tensor(self):
        return self.mamba_pool.get_state_dim_per_tensor()

    def get_state_layer_ids(self):
        return self.mamba_pool.get_state_layer_ids()
