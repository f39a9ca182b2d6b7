"""Torch tensors in and out of the C API without copies.

Device arrays (ids the kernels read or write) must be int64, contiguous and on
the pool's device: the CPU or, in a CUDA (HIP) build, the GPU the library runs on.
Host arrays (the lengths and ids the host control plane reads) may be CPU
tensors, numpy arrays or sequences; a CUDA tensor given where kvpool needs the
host copy is copied once (the device-to-host copy the reference also makes).
Memory kvpool owns (tables, the unified buffer) is exported as tensors that
keep the owning handle alive.
"""

import functools

import numpy as np
import torch

from . import errors
from ._lib import BACKEND, DEVICE_CODES, check, lib

_kokkos_device = None  # the GPU Kokkos runs on, once initialised (GPU builds)


def _initialize(index):
    """Initialises Kokkos once; in a GPU build on GPU `index`, which torch must see."""
    global _kokkos_device
    if BACKEND == "host":
        if not lib.kvpool_is_initialized():
            check(lib.kvpool_initialize())
        return
    if _kokkos_device is not None:
        return
    if not torch.cuda.is_available():
        raise errors.RuntimeFailure(
            f"this kvpool library is built for {BACKEND}, which it starts even for CPU pools, "
            "and torch sees no GPU; use a host build of kvpool on this machine",
            errors.RuntimeFailure.code,
        )
    with torch.cuda.device(index if index is not None else torch.cuda.current_device()):
        check(lib.kvpool_initialize())
        _kokkos_device = torch.cuda.current_device()


def pool_device(device):
    """The torch.device a kvpool object on `device` uses; initialises Kokkos (on it, for a GPU)."""
    dev = torch.device(device)
    if dev.type not in DEVICE_CODES:
        served = " and ".join(kind.upper() for kind in DEVICE_CODES)
        raise errors.InvalidArgumentError(
            f"this kvpool library (built for {BACKEND}) serves {served} tensors; "
            f"device {device!r} is not one of them"
        )
    if dev.type == "cpu":
        _initialize(None)
        return dev
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    _initialize(index)
    if index != _kokkos_device:
        raise errors.InvalidArgumentError(
            f"kvpool runs on cuda:{_kokkos_device} in this process; device {device!r} is another one"
        )
    return torch.device("cuda", index)


def device_code(device):
    """The KVPOOL_DEVICE_* code of a torch.device pool_device returned."""
    return DEVICE_CODES[device.type]


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_of(device):
    """The handle of torch's current stream on device (None on the host backends)."""
    if device.type != "cuda":
        return None
    if _raw_stream is not None:
        return _raw_stream(device.index) or None
    return torch.cuda.current_stream(device).cuda_stream or None


def _no_stream():
    return None


def stream_getter(device):
    """A function of no arguments that returns stream_of(device) when called: an object asks for
    torch's current stream on each call (the engine may switch streams between calls), without
    repeating the device's checks there. The default stream comes back as 0 or None, both NULL
    to the C API."""
    if device.type != "cuda":
        return _no_stream
    if _raw_stream is not None:
        return functools.partial(_raw_stream, device.index)
    return functools.partial(stream_of, device)


def device_ids(t, name, device, length=None):
    """t itself, checked: an int64 contiguous tensor on device (of `length` entries)."""
    # The accepted case in one expression, without a call: it runs on every allocation.
    if (
        isinstance(t, torch.Tensor)
        and t.dtype is torch.int64
        and (t.is_cpu if device.type == "cpu" else t.is_cuda and t.get_device() == device.index)
        and t.is_contiguous()
        and (length is None or t.numel() == length)
    ):
        return t
    if not isinstance(t, torch.Tensor):
        raise errors.InvalidArgumentError(f"{name} must be a torch tensor, got {type(t).__name__}")
    if t.dtype != torch.int64:
        raise errors.InvalidArgumentError(f"{name} must be int64, got {t.dtype}")
    if t.device != device:
        raise errors.InvalidArgumentError(f"{name} must be on {device}, got {t.device}")
    if not t.is_contiguous():
        raise errors.InvalidArgumentError(f"{name} must be contiguous")
    if length is not None and t.numel() != length:
        raise errors.InvalidArgumentError(f"{name} must have {length} entries, got {t.numel()}")
    return t


def device_index_input(t, name, device):
    """Ids to read on the device: int64 or int32 on device; int32 or a strided tensor is copied."""
    if (
        isinstance(t, torch.Tensor)
        and t.dtype is torch.int64
        and (t.is_cpu if device.type == "cpu" else t.is_cuda and t.get_device() == device.index)
        and t.is_contiguous()
    ):
        return t
    if not isinstance(t, torch.Tensor):
        raise errors.InvalidArgumentError(f"{name} must be a torch tensor, got {type(t).__name__}")
    if t.dtype not in (torch.int64, torch.int32):
        raise errors.InvalidArgumentError(f"{name} must be int64 or int32, got {t.dtype}")
    if t.device != device:
        raise errors.InvalidArgumentError(f"{name} must be on {device}, got {t.device}")
    if t.dtype != torch.int64:
        t = t.to(torch.int64)
    return t.contiguous()


class HostIds:
    """int64 ids in host memory: ``ptr`` and ``n``; keeps the memory alive."""

    __slots__ = ("array", "ptr", "n")

    def __init__(self, array, ptr, n):
        self.array = array
        self.ptr = ptr
        self.n = n


def host_ids(x, name):
    """Host int64 ids from a tensor (CPU: no copy if int64 and contiguous), an array or a sequence."""
    if isinstance(x, torch.Tensor):
        if x.is_cpu and x.dtype is torch.int64 and x.is_contiguous():
            n = x.numel()
            return HostIds(x, x.data_ptr() if n else None, n)
        if x.device.type != "cpu":
            x = x.to("cpu", torch.int64)
        elif x.dtype != torch.int64:
            if x.dtype.is_floating_point or x.dtype == torch.bool:
                raise errors.InvalidArgumentError(f"{name} must hold integers, got {x.dtype}")
            x = x.to(torch.int64)
        x = x.contiguous().view(-1)
        return HostIds(x, x.data_ptr() if x.numel() else None, x.numel())
    try:
        a = np.ascontiguousarray(x, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise errors.InvalidArgumentError(f"{name} must be integer ids: {e}") from None
    return HostIds(a, a.ctypes.data if a.size else None, int(a.size))


class _CudaArray:
    """A device array as __cuda_array_interface__, holding its owner."""

    def __init__(self, ptr, shape, typestr, owner):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (ptr, False),
            "version": 2,
        }
        self.owner = owner


class _HostArray:
    """A host array as __array_interface__, holding its owner."""

    def __init__(self, ptr, shape, typestr, owner):
        self.__array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (ptr, False),
            "version": 3,
        }
        self.owner = owner


_TYPESTR = {torch.int64: "<i8", torch.int32: "<i4", torch.uint8: "|u1"}


def export(ptr, shape, dtype, device, owner):
    """A tensor over memory kvpool owns (no copy); it keeps `owner` alive."""
    if ptr is None or int(np.prod(shape)) == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    if device.type == "cuda":
        return torch.as_tensor(_CudaArray(ptr, shape, _TYPESTR[dtype], owner), device=device)
    return torch.from_numpy(np.asarray(_HostArray(ptr, shape, _TYPESTR[dtype], owner)))


def host_view(ptr, n):
    """A numpy view of n int64 at a host address, valid while the C API call lasts."""
    if n == 0:
        return np.empty(0, dtype=np.int64)
    return np.asarray(_HostArray(ptr, (n,), "<i8", None))
