"""What every kvpool.native object is built on: a C API handle it owns, and host id runs."""

import weakref
from ctypes import byref, c_void_p

import torch

from .._lib import check, lib
from .._tensors import export, host_ids


_INT64 = torch.int64


_TENSOR = torch.Tensor


def _host_run(ids, what):
    """(ids kept alive until the call returns, their address, their count): a CPU int64
    contiguous tensor read in place (checked here, in one expression: every short call runs
    it), anything else through host_ids (its checks and errors)."""
    if type(ids) is _TENSOR and ids.is_cpu and ids.dtype is _INT64 and ids.is_contiguous():
        return ids, ids.data_ptr(), ids.numel()
    held = host_ids(ids, what)
    return held, held.ptr, held.n


class _Handle:
    """Owns one C API handle, destroyed with the object.

    Tensors over the handle's memory keep the object alive; the object keeps
    only weak references to them (a strong one would make a cycle through
    torch that the garbage collector cannot see), and exports them again when
    the engine has dropped them."""

    _destroy = None

    def __init__(self, handle):
        self._h = handle
        self._exports = {}

    def _exported(self, key, ptr, shape, dtype):
        ref = self._exports.get(key)
        tensor = ref() if ref is not None else None
        if tensor is None:
            tensor = export(ptr, shape, dtype, self.device, self)
            self._exports[key] = weakref.ref(tensor)
        return tensor

    def __del__(self):
        kv = getattr(self, "_kv", None)
        if kv:
            lib.kvpool_kv_destroy(kv)
            self._kv = None
        h = getattr(self, "_h", None)
        if h:
            type(self)._destroy(h)
            self._h = None


def _new(create, *args):
    out = c_void_p()
    check(create(*args, byref(out)))
    return out.value
