"""KV caches over a UnifiedKVPool's page-major views, in the reference's shapes.

An allocator whose ``kvcache`` is one of these (or None) relocates pages with
kvpool's own page move inside the unified buffer: one contiguous copy per
page, no Python on the way. Their ``move_kv_cache`` is there for engine code
that moves tokens itself.
"""

from typing import Dict, List, Optional, Tuple

import torch

from ..errors import InvalidArgumentError


class UnifiedMHATokenToKVPool:
    """MHA K/V of one sub-pool: per layer, views ``(num_pages, page_size, head_num, head_dim)``.
    Locations are physical token ids (``page * page_size + slot``)."""

    def __init__(
        self,
        *,
        unified_buffer,
        sub_pool_name: str,
        page_size: int = 1,
        start_layer: Optional[int] = None,
        end_layer: Optional[int] = None,
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
        self.k_buffer, self.v_buffer = unified_buffer.mha_views_for(sub_pool_name)

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
        return loc // self.page_size, loc % self.page_size

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
        if tgt_loc.numel() == 0:
            return
        tp, ts = self._split(tgt_loc)
        sp, ss = self._split(src_loc)
        for k, v in zip(self.k_buffer, self.v_buffer):
            k[tp, ts] = k[sp, ss]
            v[tp, ts] = v[sp, ss]


class UnifiedSWAKVPool:
    """The SWA pair's KV cache: ``full_kv_pool`` and ``swa_kv_pool`` over the sub-pools
    "full" and "swa" of one unified buffer; layers map to their pool by global id."""

    def __init__(
        self,
        *,
        unified_buffer,
        swa_attention_layer_ids: List[int],
        full_attention_layer_ids: List[int],
        page_size: int = 1,
        start_layer: Optional[int] = None,
        end_layer: Optional[int] = None,
        **_ignored,
    ):
        self.unified_buffer = unified_buffer
        self.page_size = page_size
        self.full_kv_pool = UnifiedMHATokenToKVPool(
            unified_buffer=unified_buffer, sub_pool_name="full", page_size=page_size
        )
        self.swa_kv_pool = UnifiedMHATokenToKVPool(
            unified_buffer=unified_buffer, sub_pool_name="swa", page_size=page_size
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

    def __init__(self, *, full_kv_pool, mamba_pool):
        self.full_kv_pool = full_kv_pool
        self.mamba_pool = mamba_pool

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
