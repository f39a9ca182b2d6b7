"""Page-major views of a unified buffer for MLA and Mamba state, under the names of SGLang's
layout module (``sglang.srt.mem_cache.layout.page_major``).

A Mamba slot (page size 1) is one envelope of ``entry_bytes``: each conv tensor of every
layer, then the temporal state of every layer; slot s is bytes ``[s * entry, (s + 1) * entry)``,
what a transfer engine copies per slot.

A side's physical page p is bytes ``[p * page_bytes, (p + 1) * page_bytes)``, all layers of
its tokens together, layer-major inside the page. For MLA every layer's row has the same
length, so a page is ``layer_num * page_size`` rows in a row, and layer l of token t sits at
row ``dense(t) = (t // ps) * (ps * layer_num) + t % ps`` of a view that starts ``l * ps`` rows
into the buffer. Each layer's *dense view* is then a contiguous ``(rows, 1, kv_cache_dim)``
tensor and one block table (dense ids, ``MultiEndedAllocator.translate_kv_loc_dense``) serves
every layer, as paged MLA kernels expect. The views overlap (view l + 1 is view l shifted by
ps rows) but dense ids never reach another layer's rows; the last layer's view runs
``(layer_num - 1) * ps`` rows past the last page, hence a tail pad of one page
(``UnifiedKVPool(view_tail_pad_bytes=...)``).

Every view is built from the C API's view descriptors (``kvpool.layout``), the layout's one
derivation; nothing here computes an offset or a stride.
"""

from typing import List, Sequence, Tuple

import torch

from ..errors import InvalidArgumentError
from ..layout import mamba_view_descriptors, mla_view_descriptors, views_from_descriptors
from .specs import _prod
from .specs import itemsize as _itemsize


def mla_entry_bytes(*, layer_num: int, kv_cache_dim: int, itemsize: int) -> int:
    """Bytes of one MLA token slot across all layers (one latent row per layer)."""
    return layer_num * kv_cache_dim * itemsize


def build_dense_mla_views(
    raw: torch.Tensor,
    *,
    layer_num: int,
    kv_cache_dim: int,
    store_dtype: torch.dtype,
    page_size: int,
    num_pages: int,
    anchor_bytes: int = 0,
) -> List[torch.Tensor]:
    """Per layer, a dense view ``(num_pages * layer_num * page_size, 1, kv_cache_dim)`` of
    store_dtype over the uint8 tensor raw, whose pages start at byte anchor_bytes. raw must
    reach the last layer's view (the pages plus ``(layer_num - 1) * page_size`` rows):
    an AssertionError (kvpool's InvalidArgumentError) says by how much it falls short."""
    size = _itemsize(store_dtype)
    if raw.dtype != torch.uint8 or raw.dim() != 1:
        raise InvalidArgumentError(
            f"build_dense_mla_views: raw must be a 1-D uint8 tensor, got {raw.dtype} "
            f"of shape {tuple(raw.shape)}"
        )
    if anchor_bytes % size != 0:
        raise InvalidArgumentError(
            f"build_dense_mla_views: anchor_bytes {anchor_bytes} is not a multiple of the "
            f"{size}-byte {store_dtype}"
        )
    descriptors = mla_view_descriptors(
        layers=layer_num,
        kv_cache_dim=kv_cache_dim,
        dtype=store_dtype,
        page_size=page_size,
        num_pages=num_pages,
        anchor_bytes=anchor_bytes,
    )
    need = max(d.end_byte() for d in descriptors)
    if need > raw.numel():
        raise InvalidArgumentError(
            f"build_dense_mla_views: layer {layer_num - 1}'s view ends at byte {need}, the "
            f"buffer has {raw.numel()}: give it a tail pad of one page "
            f"({page_size * layer_num * kv_cache_dim * size} bytes, view_tail_pad_bytes)"
        )
    return views_from_descriptors(raw, descriptors, store_dtype)


def mamba_entry_bytes(
    *,
    layer_num: int,
    conv_state_shapes: Sequence[Sequence[int]],
    conv_dtype: torch.dtype,
    temporal_state_shape: Sequence[int],
    temporal_dtype: torch.dtype,
) -> int:
    """Bytes of one Mamba state slot across all layers (conv tensors and temporal state)."""
    conv = sum(_prod(shape) for shape in conv_state_shapes) * _itemsize(conv_dtype)
    return layer_num * (conv + _prod(temporal_state_shape) * _itemsize(temporal_dtype))


def build_page_major_mamba_views(
    raw: torch.Tensor,
    *,
    layer_num: int,
    conv_state_shapes: Sequence[Sequence[int]],
    conv_dtype: torch.dtype,
    temporal_state_shape: Sequence[int],
    temporal_dtype: torch.dtype,
    max_slots: int,
    anchor_bytes: int = 0,
) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """Per conv tensor a view ``(layer_num, max_slots, *shape)``, and the temporal view
    ``(layer_num, max_slots, *temporal_state_shape)``, over the uint8 tensor raw whose slots
    start at byte anchor_bytes. A state misaligned for its dtype is an InvalidArgumentError."""
    entry = mamba_entry_bytes(
        layer_num=layer_num,
        conv_state_shapes=conv_state_shapes,
        conv_dtype=conv_dtype,
        temporal_state_shape=temporal_state_shape,
        temporal_dtype=temporal_dtype,
    )
    if anchor_bytes + max_slots * entry > raw.numel():
        raise InvalidArgumentError(
            f"build_page_major_mamba_views: {max_slots} slots of {entry} bytes from byte "
            f"{anchor_bytes} do not fit a buffer of {raw.numel()} bytes"
        )
    descriptors = mamba_view_descriptors(
        layers=layer_num,
        conv_state_shapes=conv_state_shapes,
        conv_dtype=conv_dtype,
        temporal_state_shape=temporal_state_shape,
        temporal_dtype=temporal_dtype,
        slots=max_slots,
        anchor_bytes=anchor_bytes,
    )
    dtypes = [conv_dtype] * len(conv_state_shapes) + [temporal_dtype]
    views = [views_from_descriptors(raw, [d], t)[0] for d, t in zip(descriptors, dtypes)]
    return views[:-1], views[-1]
