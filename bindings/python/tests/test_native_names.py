"""kvpool.native is the one public name space of kvpool's own Python API, whatever module of
kvpool._native a class lives in: every public name it had when it was one file imports from it,
and kvpool.sglang, built on it, imports whole and allocates through it."""

import importlib

import pytest
from support import swa_allocator

import kvpool.native

# kvpool.native's public names before it was split into kvpool._native's modules.
PUBLIC = [
    "UnifiedKVPool",
    "MultiEndedAllocator",
    "UnifiedSWAAllocator",
    "UnifiedMambaAllocator",
    "UnifiedMambaSWAAllocator",
    "ReqToTokenPool",
    "HybridReqToTokenPool",
    "allocator_options",
    "set_forward_done",
    "live_handles",
    "EvictionShortfall",
    "SubPoolTransferLayout",
    "TransferDescriptor",
    "copy_runs",
    "describe_transfer",
    "pair_layer",
    "pair_pages",
    "pair_runs",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_imports_from_kvpool_native(name):
    namespace = {}
    exec(f"from kvpool.native import {name}", namespace)
    assert namespace[name] is getattr(kvpool.native, name)


def test_every_name_in_all_resolves():
    missing = [name for name in kvpool.native.__all__ if not hasattr(kvpool.native, name)]
    assert missing == []


def test_kvpool_sglang_imports_whole():
    sglang = importlib.import_module("kvpool.sglang")
    missing = [name for name in sglang.__all__ if not hasattr(sglang, name)]
    assert missing == []


def test_kvpool_sglang_allocates_through_kvpool_native(device):
    allocator = swa_allocator(device, page_size=1)
    assert isinstance(allocator._pair, kvpool.native.UnifiedSWAAllocator)
    before = allocator.available_size()
    ids = allocator.alloc(4)
    assert ids is not None and ids.numel() == 4
    assert allocator.available_size() == before - 4
    allocator.free(ids)
    allocator.check_invariants()
