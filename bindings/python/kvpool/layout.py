"""View descriptors (the C API's kvpool_layout_*): the one derivation of the page-major layout.

For a sub-pool's geometry, C says per layer where its view starts in the unified buffer (bytes),
its element type, shape and strides (elements); ``views_from_descriptors`` builds the tensors
from them with ``torch.as_strided``, so Python never derives an offset or a stride itself.
Host arithmetic only: no pool or device memory is touched.
"""

from ctypes import Structure, addressof, byref, c_int64, c_void_p
from typing import List, Optional, Sequence

import torch

from ._lib import check, lib
from .errors import InvalidArgumentError

MAX_DIMS = 6  # KVPOOL_VIEW_MAX_DIMS

# KVPOOL_DTYPE_*: kvpool stores elements as bit patterns of these sizes.
DTYPE_FP8, DTYPE_FP16, DTYPE_BF16, DTYPE_FP32 = 0, 1, 2, 3
_CODE_SIZES = {DTYPE_FP8: 1, DTYPE_FP16: 2, DTYPE_BF16: 2, DTYPE_FP32: 4}
_CODE_TORCH = {
    DTYPE_FP8: torch.uint8,
    DTYPE_FP16: torch.float16,
    DTYPE_BF16: torch.bfloat16,
    DTYPE_FP32: torch.float32,
}


class ViewDescriptor(Structure):
    """kvpool_view_descriptor: one view's byte offset, dtype code, shape and strides (elements)."""

    _fields_ = [
        ("offset", c_int64),
        ("dtype", c_int64),
        ("ndim", c_int64),
        ("shape", c_int64 * MAX_DIMS),
        ("strides", c_int64 * MAX_DIMS),
    ]

    def sizes(self):
        return tuple(self.shape[: self.ndim])

    def stride(self):
        return tuple(self.strides[: self.ndim])

    def element_size(self):
        return _CODE_SIZES[self.dtype]

    def end_byte(self):
        """One past the last byte the view reaches (its offset when it is empty)."""
        if any(x == 0 for x in self.sizes()):
            return self.offset
        last = sum((x - 1) * s for x, s in zip(self.sizes(), self.stride()))
        return self.offset + (last + 1) * self.element_size()


class MHAViewGeometry(Structure):
    _fields_ = [
        (name, c_int64)
        for name in (
            "layers",
            "head_num",
            "head_dim",
            "v_head_dim",
            "dtype",
            "page_size",
            "num_pages",
            "anchor_bytes",
        )
    ]


class MLAViewGeometry(Structure):
    _fields_ = [
        (name, c_int64)
        for name in (
            "layers",
            "kv_cache_dim",
            "dtype",
            "page_size",
            "num_pages",
            "anchor_bytes",
            "dense",
        )
    ]


class MambaViewGeometry(Structure):
    _fields_ = [
        ("layers", c_int64),
        ("num_conv", c_int64),
        ("conv_ndims_host", c_void_p),
        ("conv_dims_host", c_void_p),
        ("conv_dtype", c_int64),
        ("temporal_ndim", c_int64),
        ("temporal_shape", c_int64 * (MAX_DIMS - 2)),
        ("temporal_dtype", c_int64),
        ("slots", c_int64),
        ("anchor_bytes", c_int64),
    ]


class MambaStateViewGeometry(Structure):
    _fields_ = [
        (name, c_int64)
        for name in (
            "layers",
            "conv_dim",
            "conv_width",
            "conv_dtype",
            "heads",
            "head_dim",
            "state_dim",
            "temporal_dtype",
            "slots",
            "anchor_bytes",
        )
    ]


def dtype_code(dtype: torch.dtype) -> int:
    """The KVPOOL_DTYPE_* code of a torch dtype, by its element size (bf16 keeps its own)."""
    if dtype == torch.bfloat16:
        return DTYPE_BF16
    size = torch.empty((), dtype=dtype).element_size()
    codes = {1: DTYPE_FP8, 2: DTYPE_FP16, 4: DTYPE_FP32}
    if size not in codes:
        raise InvalidArgumentError(
            f"kvpool lays out elements of 1, 2 or 4 bytes; {dtype} has {size}-byte elements"
        )
    return codes[size]


def _descriptors(call, geometry) -> List[ViewDescriptor]:
    count = c_int64()
    check(call(addressof(geometry), None, 0, byref(count)))
    out = (ViewDescriptor * count.value)()
    check(call(addressof(geometry), addressof(out), count.value, byref(count)))
    return list(out)


def mha_view_descriptors(
    *,
    layers,
    head_num,
    head_dim,
    v_head_dim,
    dtype: torch.dtype,
    page_size,
    num_pages,
    anchor_bytes=0,
) -> List[ViewDescriptor]:
    """2 * layers descriptors: layer l's K ``(num_pages, page_size, head_num, head_dim)`` at
    2l, its V ``(..., v_head_dim)`` at 2l + 1."""
    code = dtype_code(dtype)
    g = MHAViewGeometry(
        layers, head_num, head_dim, v_head_dim, code, page_size, num_pages, anchor_bytes
    )
    return _descriptors(lib.kvpool_layout_mha_views, g)


def mla_view_descriptors(
    *, layers, kv_cache_dim, dtype: torch.dtype, page_size, num_pages, anchor_bytes=0, dense=True
) -> List[ViewDescriptor]:
    """Per layer, the dense view ``(num_pages * layers * page_size, 1, kv_cache_dim)`` (token t
    at row ``(t // page_size) * page_size * layers + t % page_size``), or with dense=False the
    page-major ``(num_pages, page_size, 1, kv_cache_dim)``."""
    g = MLAViewGeometry(
        layers, kv_cache_dim, dtype_code(dtype), page_size, num_pages, anchor_bytes, int(dense)
    )
    return _descriptors(lib.kvpool_layout_mla_views, g)


def mamba_view_descriptors(
    *,
    layers,
    conv_state_shapes: Sequence[Sequence[int]],
    conv_dtype: torch.dtype,
    temporal_state_shape: Sequence[int],
    temporal_dtype: torch.dtype,
    slots,
    anchor_bytes=0,
) -> List[ViewDescriptor]:
    """SGLang's Mamba slots: per conv tensor ``(layers, slots, *shape)``, then the temporal
    state's; a slot holds each conv tensor of every layer, then the temporal state of every
    layer."""
    temporal = [int(x) for x in temporal_state_shape]
    if len(temporal) > MAX_DIMS - 2:
        raise InvalidArgumentError(
            f"Mamba state: the temporal state has {len(temporal)} dims, at most {MAX_DIMS - 2}"
        )
    ndims = torch.tensor([len(s) for s in conv_state_shapes], dtype=torch.int64)
    dims = torch.tensor([int(x) for s in conv_state_shapes for x in s], dtype=torch.int64)
    g = MambaViewGeometry(
        layers,
        len(conv_state_shapes),
        ndims.data_ptr(),
        dims.data_ptr(),
        dtype_code(conv_dtype),
        len(temporal),
        (c_int64 * (MAX_DIMS - 2))(*temporal),
        dtype_code(temporal_dtype),
        slots,
        anchor_bytes,
    )
    return _descriptors(lib.kvpool_layout_mamba_views, g)


def mamba_state_view_descriptors(
    *,
    layers,
    conv_dim,
    conv_width,
    conv_dtype: torch.dtype,
    heads,
    head_dim,
    state_dim,
    temporal_dtype: torch.dtype,
    slots,
    anchor_bytes=0,
) -> List[ViewDescriptor]:
    """kvpool's own padded Mamba state (C++'s PageMajorMambaPool), page size 1: per layer, the
    conv view ``(slots, conv_dim, conv_width)`` at 2l and the temporal view ``(slots, heads,
    head_dim, state_dim)`` at 2l + 1; slot s starts at ``anchor_bytes + s * entry`` bytes, the
    padding between blocks in no view."""
    g = MambaStateViewGeometry(
        layers,
        conv_dim,
        conv_width,
        dtype_code(conv_dtype),
        heads,
        head_dim,
        state_dim,
        dtype_code(temporal_dtype),
        slots,
        anchor_bytes,
    )
    return _descriptors(lib.kvpool_layout_mamba_state_views, g)


def mamba_state_entry_bytes(**geometry) -> int:
    """The bytes of one slot of the padded Mamba state (mamba_state_view_descriptors' geometry
    without slots and anchor_bytes): the entry_bytes of a side that holds it, as C lays it out."""
    d = mamba_state_view_descriptors(**geometry, slots=0)[0]
    return d.strides[0] * d.element_size()


def views_from_descriptors(
    raw: torch.Tensor, descriptors: Sequence[ViewDescriptor], dtype: Optional[torch.dtype] = None
) -> List[torch.Tensor]:
    """One ``torch.as_strided`` view of the 1-D uint8 tensor raw per descriptor, of dtype (None:
    the descriptor's own; else one of the descriptor's element size, e.g. an fp8 type). A view
    that runs past raw is an InvalidArgumentError naming where it ends."""
    if raw.dtype != torch.uint8 or raw.dim() != 1:
        raise InvalidArgumentError(
            f"views_from_descriptors: raw must be a 1-D uint8 tensor, got {raw.dtype} "
            f"of shape {tuple(raw.shape)}"
        )
    views = []
    typed = {}
    for d in descriptors:
        as_dtype = _CODE_TORCH[d.dtype] if dtype is None else dtype
        size = d.element_size()
        if torch.empty((), dtype=as_dtype).element_size() != size:
            raise InvalidArgumentError(
                f"views_from_descriptors: {as_dtype} does not have the descriptor's {size}-byte "
                f"elements"
            )
        if d.end_byte() > raw.numel():
            raise InvalidArgumentError(
                f"views_from_descriptors: a view ends at byte {d.end_byte()}, the buffer has "
                f"{raw.numel()}"
            )
        if as_dtype not in typed:
            typed[as_dtype] = raw[: raw.numel() // size * size].view(as_dtype)
        views.append(torch.as_strided(typed[as_dtype], d.sizes(), d.stride(), d.offset // size))
    return views
