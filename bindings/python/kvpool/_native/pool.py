"""kvpool.native.UnifiedKVPool: the one byte buffer the sub-pools share."""

from ctypes import byref, c_int64, c_void_p

import torch

from .. import _lib
from .._lib import check, lib
from .._tensors import device_code, pool_device, stream_getter
from .handle import _Handle, _new


def _grow_code(name, grow):
    """A sub-pool's KVPOOL_GROW_* code: "up", "down" or "floating" (a bool: grow_down)."""
    if isinstance(grow, bool):
        return _lib.GROW_CODES["down" if grow else "up"]
    if grow not in _lib.GROW_CODES:
        raise _lib.errors.InvalidArgumentError(
            f"sub-pool {name!r}: grow must be 'up', 'down' or 'floating', not {grow!r}"
        )
    return _lib.GROW_CODES[grow]


class UnifiedKVPool(_Handle):
    """The unified byte buffer: ``sub_pools`` a list of ``(name, entry_bytes, page_size,
    grow)`` or ``(name, entry_bytes, page_size, grow, float_at)`` (C++'s SubPoolSpec), grow
    "up", "down" or "floating" (a bool: whether it grows down). One sub-pool, two growing
    toward each other, or more listed from the low end up: one up, the floating ones, one
    down; a floating sub-pool's empty band starts at float_at, a fraction of the buffer (0.5
    when not given). ``buffer``: a uint8 tensor the engine owns, adopted as it is; otherwise
    kvpool allocates the bytes (zeroed) and ``bytes`` exports them."""

    _destroy = lib.kvpool_unified_kv_pool_destroy

    def __init__(self, total_bytes, sub_pools, device, buffer=None):
        self.device = pool_device(device)
        self._stream = stream_getter(self.device)
        self.page_sizes = {name: int(page_size) for name, _, page_size, *_ in sub_pools}
        specs = (_lib.SubPoolSpec * len(sub_pools))()
        for spec, (name, entry_bytes, page_size, grow, *float_at) in zip(specs, sub_pools):
            spec.name = name.encode()
            spec.entry_bytes = int(entry_bytes)
            spec.page_size = int(page_size)
            spec.grow = _grow_code(name, grow)
            spec.max_tokens = 0
            spec.float_at = float(float_at[0]) if float_at else 0.5
        adopt = None
        if buffer is not None:
            if not isinstance(buffer, torch.Tensor) or buffer.dtype != torch.uint8:
                raise _lib.errors.InvalidArgumentError("buffer must be a uint8 tensor")
            if buffer.device != self.device or not buffer.is_contiguous():
                raise _lib.errors.InvalidArgumentError(
                    f"buffer must be contiguous and on {self.device}"
                )
            if buffer.numel() < total_bytes:
                raise _lib.errors.InvalidArgumentError(
                    f"buffer has {buffer.numel()} bytes, total_bytes is {total_bytes}"
                )
            adopt = buffer.data_ptr()
        super().__init__(
            _new(
                lib.kvpool_unified_kv_pool_create_on,
                device_code(self.device),
                int(total_bytes),
                specs,
                len(sub_pools),
                adopt,
                self._stream(),
            )
        )
        self._adopted = buffer[:total_bytes] if buffer is not None else None
        sink = c_int64()
        check(lib.kvpool_unified_kv_pool_sink_bytes(self._h, byref(sink)))
        self.sink_bytes = sink.value

    @property
    def bytes(self):
        """The buffer as a uint8 tensor: the adopted tensor, or kvpool's memory (no copy)."""
        if self._adopted is not None:
            return self._adopted
        data, size = c_void_p(), c_int64()
        check(lib.kvpool_unified_kv_pool_bytes(self._h, byref(data), byref(size)))
        return self._exported("bytes", data.value, (size.value,), torch.uint8)
