"""kvpool: one GPU byte buffer shared by the KV caches of hybrid LLMs.

``kvpool.native`` holds kvpool's own Python API over its C API;
``kvpool.sglang`` the drop-in classes with SGLang's names and conventions.
"""

import atexit

from . import errors
from ._lib import BACKEND, DEVICE_CODES, lib
from .errors import KVPoolAssertionError, KVPoolError

__version__ = lib.kvpool_version().decode()


def backend():
    """The GPU runtime the library is built for: "cuda", "hip" or "host" (none)."""
    return BACKEND


def devices():
    """The torch device types kvpool objects can live on: ("cpu",) in a host build, ("cpu",
    "cuda") in a CUDA or HIP build (ROCm's PyTorch names its GPUs "cuda"), in one process."""
    return tuple(DEVICE_CODES)


def initialize(device=None):
    """Initialises Kokkos on device (default: the current GPU in a GPU build, the CPU in a host
    build); kvpool otherwise does it on first use."""
    from ._tensors import pool_device

    if device is None:
        device = "cuda" if "cuda" in DEVICE_CODES else "cpu"
    return pool_device(device)


def finalize_when_unused():
    """Finalises Kokkos once every kvpool object is gone (it cannot be used again after)."""
    from ._lib import check

    check(lib.kvpool_finalize_when_unused())


# At exit, Kokkos is finalised once the last kvpool object is gone (objects that
# outlive interpreter teardown leave it to the process exit).
atexit.register(lib.kvpool_finalize_when_unused)

__all__ = [
    "KVPoolError",
    "KVPoolAssertionError",
    "backend",
    "devices",
    "errors",
    "finalize_when_unused",
    "initialize",
]
