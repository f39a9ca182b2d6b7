"""Sub-pool specs of a UnifiedKVPool, with the reference's fields and byte math."""

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from ..errors import InvalidArgumentError
from ..layout import mha_view_descriptors


def _require(condition, message):
    if not condition:
        raise InvalidArgumentError(message)


def itemsize(dtype: torch.dtype) -> int:
    """Bytes of one element (torch 1.13 has no dtype.itemsize)."""
    return torch.empty((), dtype=dtype).element_size()


def _prod(shape):
    out = 1
    for x in shape:
        out *= int(x)
    return out


@dataclass(frozen=True, kw_only=True)
class SubPoolSpec:
    """Per-slot layout of one sub-pool: a name, its layer count, its end of the buffer
    ("up", "down", or kvpool's "floating": a band between the two, of the tri-pool, whose
    empty band starts at ``float_at``, a fraction of the buffer; other sub-pools ignore it)."""

    name: str
    layer_num: int
    grow_direction: str  # "up" | "down" | "floating"
    float_at: float = 0.5

    def __post_init__(self):
        _require(
            self.grow_direction in ("up", "down", "floating"),
            f"grow_direction must be 'up', 'down' or 'floating'; got {self.grow_direction!r}",
        )
        _require(self.layer_num > 0, f"layer_num must be positive; got {self.layer_num}")

    def entry_bytes(self) -> int:
        """Bytes of one slot across all layers of this sub-pool."""
        raise NotImplementedError

    def get_dtype(self) -> torch.dtype:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class MHASubPoolSpec(SubPoolSpec):
    """K and V rows per layer; ``v_head_dim`` defaults to ``head_dim``. A page holds,
    per layer, its page_size K rows then its page_size V rows."""

    head_num: int
    head_dim: int
    store_dtype: torch.dtype
    v_head_dim: Optional[int] = None

    def __post_init__(self):
        super().__post_init__()
        _require(self.head_num > 0, f"head_num must be positive; got {self.head_num}")
        _require(self.head_dim > 0, f"head_dim must be positive; got {self.head_dim}")
        if self.v_head_dim is None:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        _require(self.v_head_dim > 0, f"v_head_dim must be positive; got {self.v_head_dim}")

    def k_row_bytes(self) -> int:
        return self.head_num * self.head_dim * itemsize(self.store_dtype)

    def v_row_bytes(self) -> int:
        return self.head_num * self.v_head_dim * itemsize(self.store_dtype)

    def entry_bytes(self) -> int:
        return self.layer_num * (self.k_row_bytes() + self.v_row_bytes())

    def page_bytes(self, page_size: int) -> int:
        return page_size * self.entry_bytes()

    def view_descriptors(self, page_size: int, num_pages: int = 1):
        """kvpool.layout's descriptors of num_pages pages from byte 0: layer l's K at 2l, its
        V at 2l + 1."""
        return mha_view_descriptors(
            layers=self.layer_num,
            head_num=self.head_num,
            head_dim=self.head_dim,
            v_head_dim=self.v_head_dim,
            dtype=self.store_dtype,
            page_size=page_size,
            num_pages=num_pages,
        )

    def _layer_views(self, layer_id: int, page_size: int):
        _require(
            0 <= layer_id < self.layer_num,
            f"layer_id {layer_id} outside the sub-pool's {self.layer_num} layers",
        )
        views = self.view_descriptors(page_size)
        return views[2 * layer_id], views[2 * layer_id + 1]

    def layer_k_offset_in_page(self, layer_id: int, page_size: int) -> int:
        return self._layer_views(layer_id, page_size)[0].offset

    def layer_v_offset_in_page(self, layer_id: int, page_size: int) -> int:
        return self._layer_views(layer_id, page_size)[1].offset

    def get_dtype(self) -> torch.dtype:
        return self.store_dtype


@dataclass(frozen=True, kw_only=True)
class MambaSubPoolSpec(SubPoolSpec):
    """Mamba state per slot (page size 1): each conv tensor for every layer, then the
    temporal state for every layer."""

    conv_state_shapes: Tuple[Tuple[int, ...], ...]
    conv_dtype: torch.dtype
    temporal_state_shape: Tuple[int, ...]
    temporal_dtype: torch.dtype

    def __post_init__(self):
        super().__post_init__()
        _require(len(self.conv_state_shapes) > 0, "conv_state_shapes must be non-empty")

    def conv_row_bytes(self, idx: int) -> int:
        return _prod(self.conv_state_shapes[idx]) * itemsize(self.conv_dtype)

    def temporal_row_bytes(self) -> int:
        return _prod(self.temporal_state_shape) * itemsize(self.temporal_dtype)

    def entry_bytes(self) -> int:
        conv = sum(self.conv_row_bytes(i) for i in range(len(self.conv_state_shapes)))
        return self.layer_num * (conv + self.temporal_row_bytes())

    def get_dtype(self) -> torch.dtype:
        return self.conv_dtype


@dataclass(frozen=True, kw_only=True)
class MLASubPoolSpec(SubPoolSpec):
    """Multi-head latent attention: one row of ``kv_lora_rank + qk_rope_head_dim`` elements
    per token and layer, V being the row's first ``kv_lora_rank`` elements (no V rows). A page
    holds, per layer, its page_size rows; a UnifiedKVPool reads them through dense views."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    store_dtype: torch.dtype

    def __post_init__(self):
        super().__post_init__()
        _require(self.kv_lora_rank > 0, f"kv_lora_rank must be positive; got {self.kv_lora_rank}")
        _require(
            self.qk_rope_head_dim > 0,
            f"qk_rope_head_dim must be positive; got {self.qk_rope_head_dim}",
        )

    @property
    def kv_cache_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def entry_bytes(self) -> int:
        return self.layer_num * self.kv_cache_dim * itemsize(self.store_dtype)

    def page_bytes(self, page_size: int) -> int:
        return page_size * self.entry_bytes()

    def get_dtype(self) -> torch.dtype:
        return self.store_dtype
