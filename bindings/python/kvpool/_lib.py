"""Loads libkvpool_c (the C API) with ctypes and declares its functions.

The compiled part of kvpool is this one shared library per Kokkos
configuration; nothing here depends on the Python version. It is found at
``$KVPOOL_LIBRARY`` if set, else in ``kvpool/lib/`` inside this package (where
``pip install .`` puts it), else where the installed distribution's record has
it (an editable install: the package is the source tree, the library is in
site-packages).
"""

import ctypes
import importlib.metadata
import os
import threading
from ctypes import POINTER, c_char_p, c_double, c_int, c_int64, c_uint64, c_void_p

from . import errors

_P = c_void_p  # every array and handle crosses as a plain address
_I64 = c_int64
_PI = POINTER(c_int)
_PI64 = POINTER(c_int64)
_PU64 = POINTER(c_uint64)
_PP = POINTER(c_void_p)

MOVE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_int64)
QUERY_FN = ctypes.CFUNCTYPE(c_int, c_void_p)
RELEASE_FN = ctypes.CFUNCTYPE(None, c_void_p)


# kvpool_sub_pool_spec.grow and kvpool_allocator_info.grow: KVPOOL_GROW_UP, _DOWN, _FLOATING.
GROW_CODES = {"up": 0, "down": 1, "floating": 2}
GROW_NAMES = {code: name for name, code in GROW_CODES.items()}


class SubPoolSpec(ctypes.Structure):
    _fields_ = [
        ("name", c_char_p),
        ("entry_bytes", c_int64),
        ("page_size", c_int64),
        ("grow", c_int),
        ("max_tokens", c_int64),
        ("float_at", c_double),
    ]


class AllocatorOptions(ctypes.Structure):
    _fields_ = [
        ("lazy", c_int),
        ("is_id_owner", c_int),
        ("max_moves_per_flush", c_int64),
        ("zero_on_alloc", c_int),
    ]


class AllocatorInfo(ctypes.Structure):
    _fields_ = [
        ("entry_bytes", c_int64),
        ("page_size", c_int64),
        ("page_bytes", c_int64),
        ("num_physical_pages", c_int64),
        ("num_virtual_pages", c_int64),
        ("min_page_index", c_int64),
        ("page_capacity", c_int64),
        ("grow", c_int),
        ("is_id_owner", c_int),
        ("lazy", c_int),
        ("max_moves_per_flush", c_int64),
        ("zero_on_alloc", c_int),
    ]


class AllocatorState(ctypes.Structure):
    _fields_ = [
        (name, c_int64)
        for name in (
            "available_size",
            "schedulable_available_size",
            "allocated_count",
            "watermark",
            "live_pages",
            "hole_pages",
            "pending_reuse_pages",
            "free_virtual_pages",
            "gap_bytes",
            "gap_below_bytes",
            "gap_above_bytes",
        )
    ]


class AllocatorCounters(ctypes.Structure):
    _fields_ = [
        (name, c_int64)
        for name in (
            "allocs",
            "failed_allocs",
            "frees",
            "pages_allocated",
            "pages_freed",
            "pages_moved",
            "bytes_moved",
            "flushes",
            "pages_absorbed",
            "holes_peak",
        )
    ]


class SWASizes(ctypes.Structure):
    _fields_ = [
        (name, c_int64)
        for name in (
            "available_size",
            "conserve_full_available_size",
            "conserve_swa_available_size",
            "schedulable_full_available_size",
            "schedulable_swa_available_size",
            "full_available_size",
            "swa_available_size",
        )
    ]


class EvictionShortfall(ctypes.Structure):
    """kvpool_eviction_shortfall: what an allocation lacks when it calls the eviction callback."""

    _fields_ = [
        ("side", ctypes.c_char_p),
        ("pages", c_int64),
        ("bytes", c_int64),
        ("requested_pages", c_int64),
    ]


EVICT_FN = ctypes.CFUNCTYPE(c_int64, c_void_p, POINTER(EvictionShortfall))


class MambaSizes(ctypes.Structure):
    _fields_ = [
        ("available_size", c_int64),
        ("state_slots_available", c_int64),
        ("state_slot_full_token_cost", c_int64),
        ("state_slot_starved", c_int),
    ]


class MambaSWASizes(ctypes.Structure):
    _fields_ = [
        (name, c_int64)
        for name in ("available_size", "state_slots_available", "state_slot_full_token_cost")
    ]


class HybridReqToTokenPoolOptions(ctypes.Structure):
    _fields_ = [
        ("enable_mamba_extra_buffer", c_int),
        ("enable_mamba_extra_buffer_lazy", c_int),
        ("mamba_ping_pong_track_buffer_size", c_int64),
    ]


# name: (argument types), all returning a status unless listed in _OTHER_RESTYPES.
_SIGNATURES = {
    "kvpool_last_error": (),
    "kvpool_backend": (),
    "kvpool_c_api_version": (),
    "kvpool_version": (),
    "kvpool_build_info": (),
    "kvpool_serves": (c_int,),
    "kvpool_is_initialized": (),
    "kvpool_initialize": (),
    "kvpool_finalize_when_unused": (),
    "kvpool_live_handles": (),
    "kvpool_device_faults_fail_nth": (c_int, c_int64),
    "kvpool_device_faults_reset": (),
    "kvpool_device_faults_count": (c_int,),
    "kvpool_completion_token_from_query": (QUERY_FN, RELEASE_FN, _P, _PP),
    "kvpool_completion_token_from_cuda_event": (_P, RELEASE_FN, _P, _PP),
    "kvpool_completion_token_from_hip_event": (_P, RELEASE_FN, _P, _PP),
    "kvpool_completion_token_release": (_P,),
    "kvpool_unified_kv_pool_create": (_I64, POINTER(SubPoolSpec), c_int, _P, _P, _PP),
    "kvpool_unified_kv_pool_create_on": (c_int, _I64, POINTER(SubPoolSpec), c_int, _P, _P, _PP),
    "kvpool_unified_kv_pool_destroy": (_P,),
    "kvpool_unified_kv_pool_device": (_P, _PI),
    "kvpool_unified_kv_pool_bytes": (_P, _PP, _PI64),
    "kvpool_unified_kv_pool_sink_bytes": (_P, _PI64),
    "kvpool_multi_ended_allocator_create": (_P, c_char_p, POINTER(AllocatorOptions), _P, _PP),
    "kvpool_multi_ended_allocator_destroy": (_P,),
    "kvpool_multi_ended_allocator_bind_peer": (_P, _P),
    "kvpool_multi_ended_allocator_set_move_callback": (_P, MOVE_FN, _P),
    "kvpool_multi_ended_allocator_info": (_P, POINTER(AllocatorInfo)),
    "kvpool_multi_ended_allocator_state": (_P, POINTER(AllocatorState)),
    "kvpool_multi_ended_allocator_counters": (_P, POINTER(AllocatorCounters)),
    "kvpool_multi_ended_allocator_state_string": (_P, POINTER(c_char_p)),
    "kvpool_multi_ended_allocator_tables": (_P, _PP, _PI64, _PP, _PI64),
    "kvpool_multi_ended_allocator_free_virtual_pages": (_P, _P, _I64, _PI64),
    "kvpool_multi_ended_allocator_is_slot_allocated": (_P, _I64, _PI),
    "kvpool_multi_ended_allocator_alloc": (_P, _P, _I64, _P, _PI),
    "kvpool_multi_ended_allocator_alloc_with_virtual": (_P, _P, _P, _I64, _PI),
    "kvpool_multi_ended_allocator_alloc_extend": (_P, _P, _P, _P, _I64, _P, _P, _I64, _PI),
    "kvpool_multi_ended_allocator_alloc_decode": (_P, _P, _P, _I64, _P, _P, _PI),
    "kvpool_multi_ended_allocator_free": (_P, _P, _P, _I64, c_int),
    "kvpool_multi_ended_allocator_free_group_begin": (_P,),
    "kvpool_multi_ended_allocator_free_group_end": (_P, _P),
    "kvpool_multi_ended_allocator_flush": (_P, _P, c_int, _PI64),
    "kvpool_multi_ended_allocator_drain_pending_reuse": (_P,),
    "kvpool_multi_ended_allocator_set_latest_forward_done": (_P, _P),
    "kvpool_multi_ended_allocator_set_inflight_forward": (_P, _P, _P, _I64),
    "kvpool_multi_ended_allocator_gate_transfer": (_P, _P, _P, _I64),
    "kvpool_multi_ended_allocator_translate": (_P, _P, _P, _I64, _P, c_int),
    "kvpool_multi_ended_allocator_translate_dense": (_P, _P, _P, _I64, _P, _I64),
    "kvpool_multi_ended_allocator_backup_state": (_P, _PP),
    "kvpool_multi_ended_allocator_restore_state": (_P, _P, _P),
    "kvpool_multi_ended_allocator_commit_state": (_P, _P),
    "kvpool_allocator_snapshot_destroy": (_P,),
    "kvpool_multi_ended_allocator_clear": (_P, _P),
    "kvpool_multi_ended_allocator_check_invariants": (_P, _P),
    "kvpool_unified_swa_allocator_create": (
        _P,
        c_char_p,
        c_char_p,
        POINTER(AllocatorOptions),
        POINTER(AllocatorOptions),
        _PP,
    ),
    "kvpool_unified_swa_allocator_destroy": (_P,),
    "kvpool_unified_swa_allocator_side": (_P, c_int, _PP),
    "kvpool_unified_swa_allocator_sizes": (_P, POINTER(SWASizes)),
    "kvpool_unified_swa_allocator_alloc": (_P, _P, _I64, _P, _PI),
    "kvpool_unified_swa_allocator_alloc_extend": (_P, _P, _P, _P, _I64, _P, _P, _I64, _PI),
    "kvpool_unified_swa_allocator_alloc_decode": (_P, _P, _P, _I64, _P, _P, _PI),
    "kvpool_unified_swa_allocator_set_eviction_callback": (_P, EVICT_FN, _P),
    "kvpool_unified_swa_allocator_free": (_P, _P, _P, _I64),
    "kvpool_unified_swa_allocator_free_swa": (_P, _P, _P, _I64),
    "kvpool_unified_swa_allocator_gate_transfer": (_P, _P, _P, _I64),
    "kvpool_unified_swa_allocator_backup_state": (_P, _PP),
    "kvpool_unified_swa_allocator_restore_state": (_P, _P, _P),
    "kvpool_unified_swa_allocator_commit_state": (_P, _P),
    "kvpool_pair_snapshot_destroy": (_P,),
    "kvpool_unified_mamba_allocator_create": (
        _P,
        c_char_p,
        c_char_p,
        POINTER(AllocatorOptions),
        POINTER(AllocatorOptions),
        _PP,
    ),
    "kvpool_unified_mamba_allocator_destroy": (_P,),
    "kvpool_unified_mamba_allocator_side": (_P, c_int, _PP),
    "kvpool_unified_mamba_allocator_sizes": (_P, POINTER(MambaSizes)),
    "kvpool_unified_mamba_allocator_alloc": (_P, _P, _I64, _P, _PI),
    "kvpool_unified_mamba_allocator_alloc_extend": (_P, _P, _P, _P, _I64, _P, _P, _I64, _PI),
    "kvpool_unified_mamba_allocator_alloc_decode": (_P, _P, _P, _I64, _P, _P, _PI),
    "kvpool_unified_mamba_allocator_alloc_state_slots": (_P, _P, _I64, _P, _PI),
    "kvpool_unified_mamba_allocator_set_eviction_callback": (_P, EVICT_FN, _P),
    "kvpool_unified_mamba_allocator_gate_transfer": (_P, _P, _P, _I64, _P, _I64),
    "kvpool_unified_mamba_allocator_backup_state": (_P, _PP),
    "kvpool_unified_mamba_allocator_restore_state": (_P, _P, _P),
    "kvpool_unified_mamba_allocator_commit_state": (_P, _P),
    "kvpool_unified_mamba_swa_allocator_create": (
        _P,
        c_char_p,
        c_char_p,
        c_char_p,
        POINTER(AllocatorOptions),
        POINTER(AllocatorOptions),
        POINTER(AllocatorOptions),
        _PP,
    ),
    "kvpool_unified_mamba_swa_allocator_destroy": (_P,),
    "kvpool_unified_mamba_swa_allocator_side": (_P, c_int, _PP),
    "kvpool_unified_mamba_swa_allocator_sizes": (_P, POINTER(MambaSWASizes)),
    "kvpool_unified_mamba_swa_allocator_alloc": (_P, _P, _I64, _P, _PI),
    "kvpool_unified_mamba_swa_allocator_alloc_extend": (_P, _P, _P, _P, _I64, _P, _P, _I64, _PI),
    "kvpool_unified_mamba_swa_allocator_alloc_decode": (_P, _P, _P, _I64, _P, _P, _PI),
    "kvpool_unified_mamba_swa_allocator_free": (_P, _P, _P, _I64),
    "kvpool_unified_mamba_swa_allocator_free_swa": (_P, _P, _P, _I64),
    "kvpool_unified_mamba_swa_allocator_free_group_begin": (_P,),
    "kvpool_unified_mamba_swa_allocator_free_group_end": (_P, _P),
    "kvpool_unified_mamba_swa_allocator_alloc_state_slots": (_P, _P, _I64, _P, _PI),
    "kvpool_unified_mamba_swa_allocator_set_eviction_callback": (_P, EVICT_FN, _P),
    "kvpool_unified_mamba_swa_allocator_gate_transfer": (_P, _P, _P, _I64, _P, _I64),
    "kvpool_unified_mamba_swa_allocator_flush_opportunistic": (_P, _P, _PI64),
    "kvpool_unified_mamba_swa_allocator_set_latest_forward_done": (_P, _P),
    "kvpool_unified_mamba_swa_allocator_set_inflight_forward": (_P, _P, _P, _I64),
    "kvpool_unified_mamba_swa_allocator_drain_pending_reuse": (_P,),
    "kvpool_unified_mamba_swa_allocator_backup_state": (_P, _PP),
    "kvpool_unified_mamba_swa_allocator_restore_state": (_P, _P, _P),
    "kvpool_unified_mamba_swa_allocator_commit_state": (_P, _P),
    "kvpool_mamba_swa_snapshot_destroy": (_P,),
    "kvpool_unified_mamba_swa_allocator_clear": (_P, _P),
    "kvpool_unified_mamba_swa_allocator_check_invariants": (_P, _P),
    "kvpool_req_to_token_pool_create": (_I64, _I64, _P, _PP),
    "kvpool_req_to_token_pool_create_on": (c_int, _I64, _I64, _P, _PP),
    "kvpool_req_to_token_pool_destroy": (_P,),
    "kvpool_req_to_token_pool_table": (_P, _PP, _PI64, _PI64),
    "kvpool_req_to_token_pool_available": (_P, _PI64),
    "kvpool_req_to_token_pool_generation": (_P, _I64, _PI64),
    "kvpool_req_to_token_pool_alloc": (_P, _I64, _P, _PI),
    "kvpool_req_to_token_pool_free": (_P, _P, _I64),
    "kvpool_req_to_token_pool_clear": (_P,),
    "kvpool_req_to_token_pool_write": (_P, _P, _I64, _I64, _P, _I64),
    "kvpool_req_to_token_pool_check_invariants": (_P, _P),
    "kvpool_hybrid_req_to_token_pool_create": (_I64, _I64, _P, POINTER(HybridReqToTokenPoolOptions), _P, _PP),
    "kvpool_hybrid_req_to_token_pool_destroy": (_P,),
    "kvpool_hybrid_req_to_token_pool_tables": (_P, _PP, _PI64, _PI64, _PP, _PP, _PI64),
    "kvpool_hybrid_req_to_token_pool_available": (_P, _PI64),
    "kvpool_hybrid_req_to_token_pool_generation": (_P, _I64, _PI64),
    "kvpool_hybrid_req_to_token_pool_alloc": (_P, _P, _P, _I64, _P, _PI),
    "kvpool_hybrid_req_to_token_pool_free": (_P, _P, _I64),
    "kvpool_hybrid_req_to_token_pool_free_mamba_cache": (_P, _P, _I64, _I64, _PI64),
    "kvpool_hybrid_req_to_token_pool_request": (_P, _I64, _PI64, _P, _PI64),
    "kvpool_hybrid_req_to_token_pool_set_next_track_idx": (_P, _I64, _I64),
    "kvpool_hybrid_req_to_token_pool_set_track_slot": (_P, _P, _I64, _I64, _I64, _PI64),
    "kvpool_hybrid_req_to_token_pool_donate_track_slot": (_P, _P, _I64, _I64, _PI64),
    "kvpool_hybrid_req_to_token_pool_alloc_track_slot": (_P, _P, _I64, _I64, _PI),
    "kvpool_hybrid_req_to_token_pool_clear": (_P, _P),
    "kvpool_hybrid_req_to_token_pool_check_invariants": (_P, _P),
    # PD transfer descriptors (kvpool.transfer; its structs cross by address)
    "kvpool_transfer_describe": (_P, _P, _P, _P, _I64, _PP),
    "kvpool_transfer_destroy": (_P,),
    "kvpool_transfer_get_info": (_P, _P),
    "kvpool_transfer_page_runs": (_P, _P, _I64, _PI64),
    "kvpool_transfer_layer_runs": (_P, _I64, _I64, _P, _I64, _PI64),
    "kvpool_transfer_pair_pages": (_P, _P, _P, _I64, _PI64),
    "kvpool_transfer_pair_layer": (_P, _P, _I64, _I64, _P, _I64, _PI64),
    "kvpool_transfer_pair_runs": (_P, _I64, _P, _I64, _P, _I64, _PI64),
    "kvpool_transfer_copy_runs": (c_int, _P, _P, _I64, _P, _I64, _P, _I64),
    # view descriptors (kvpool.layout; its structs cross by address)
    "kvpool_layout_mha_views": (_P, _P, _I64, _PI64),
    "kvpool_layout_mla_views": (_P, _P, _I64, _PI64),
    "kvpool_layout_mamba_views": (_P, _P, _I64, _PI64),
    "kvpool_layout_mamba_state_views": (_P, _P, _I64, _PI64),
    # state digests of tensor-parallel ranks (kvpool.native's state_digest())
    "kvpool_multi_ended_allocator_state_digest": (_P, _PU64),
    "kvpool_unified_swa_allocator_state_digest": (_P, _PU64),
    "kvpool_unified_mamba_allocator_state_digest": (_P, _PU64),
    "kvpool_unified_mamba_swa_allocator_state_digest": (_P, _PU64),
    # the KV-allocator handle (c_api_kv.h): one entry point per op every allocator shares
    "kvpool_multi_ended_allocator_kv": (_P, _PP),
    "kvpool_unified_swa_allocator_kv": (_P, _PP),
    "kvpool_unified_mamba_allocator_kv": (_P, _PP),
    "kvpool_unified_mamba_swa_allocator_kv": (_P, _PP),
    "kvpool_kv_destroy": (_P,),
    "kvpool_kv_kind": (_P, _PI, _PI),
    "kvpool_kv_side": (_P, c_int, _PP),
    "kvpool_kv_set_caller_checks_memory": (_P, c_int),
    "kvpool_kv_available_size": (_P, _PI64),
    "kvpool_kv_alloc": (_P, _P, _I64, _P, _PI),
    "kvpool_kv_alloc_extend": (_P, _P, _P, _P, _I64, _P, _P, _I64, _PI),
    "kvpool_kv_alloc_decode": (_P, _P, _P, _I64, _P, _P, _PI),
    "kvpool_kv_alloc_state_slots": (_P, _P, _I64, _P, _PI),
    "kvpool_kv_free": (_P, _P, _P, _I64),
    "kvpool_kv_free_swa": (_P, _P, _P, _I64),
    "kvpool_kv_free_group_begin": (_P,),
    "kvpool_kv_free_group_end": (_P, _P),
    "kvpool_kv_flush": (_P, _P, _PI64),
    "kvpool_kv_drain_pending_reuse": (_P,),
    "kvpool_kv_set_latest_forward_done": (_P, _P),
    "kvpool_kv_set_inflight_forward": (_P, _P, _P, _I64),
    "kvpool_kv_gate_transfer": (_P, _P, _P, _I64, _P, _I64),
    "kvpool_kv_translate": (_P, _P, _P, _I64, _P, c_int),
    "kvpool_kv_set_eviction_callback": (_P, EVICT_FN, _P),
    "kvpool_kv_state_digest": (_P, _PU64),
    "kvpool_kv_backup_state": (_P, _PP),
    "kvpool_kv_restore_state": (_P, _P, _P),
    "kvpool_kv_commit_state": (_P, _P),
    "kvpool_kv_snapshot_destroy": (_P,),
    "kvpool_kv_clear": (_P, _P),
    "kvpool_kv_check_invariants": (_P, _P),
}

_OTHER_RESTYPES = {
    "kvpool_last_error": c_char_p,
    "kvpool_backend": c_char_p,
    "kvpool_c_api_version": c_int,
    "kvpool_version": c_char_p,
    "kvpool_build_info": c_char_p,
    "kvpool_serves": c_int,
    "kvpool_is_initialized": c_int,
    "kvpool_live_handles": c_int64,
    "kvpool_device_faults_reset": None,
    "kvpool_device_faults_count": c_int64,
    "kvpool_completion_token_release": None,
    "kvpool_unified_kv_pool_destroy": None,
    "kvpool_multi_ended_allocator_destroy": None,
    "kvpool_allocator_snapshot_destroy": None,
    "kvpool_pair_snapshot_destroy": None,
    "kvpool_unified_swa_allocator_destroy": None,
    "kvpool_unified_mamba_allocator_destroy": None,
    "kvpool_unified_mamba_swa_allocator_destroy": None,
    "kvpool_mamba_swa_snapshot_destroy": None,
    "kvpool_req_to_token_pool_destroy": None,
    "kvpool_hybrid_req_to_token_pool_destroy": None,
    "kvpool_transfer_destroy": None,
    "kvpool_kv_destroy": None,
    "kvpool_kv_snapshot_destroy": None,
}

CALLBACK_FAILED = errors.CallbackError.code


_LIBRARY = "libkvpool_c.so"


def _installed_library():
    """The library of an editable install of this package: its record holds the library but no
    Python sources (a record with sources installed another copy of the package)."""
    try:
        files = importlib.metadata.files("kvpool") or ()
    except importlib.metadata.PackageNotFoundError:
        return None
    library = None
    for file in files:
        if file.name == "__init__.py" and file.parent.name == "kvpool":
            return None
        if file.name == _LIBRARY and file.parent.name == "lib":
            library = str(file.locate())
    return library


def _library_path():
    path = os.environ.get("KVPOOL_LIBRARY")
    if path:
        return path
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", _LIBRARY)
    if os.path.exists(path):
        return path
    return _installed_library() or path


def _load(path):
    if not os.path.exists(path):
        raise ImportError(
            f"kvpool: the C API library is not at {path}. Install the package with pip from the "
            "repository root (pip install --no-build-isolation .; see README), or build it "
            "(cmake --build --preset cpu --target kvpool_c) and set KVPOOL_LIBRARY to "
            "build/<preset>/lib/libkvpool_c.so."
        )
    lib = ctypes.CDLL(path)
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = list(argtypes)
        fn.restype = _OTHER_RESTYPES.get(name, c_int)
    return lib


LIBRARY_PATH = _library_path()
lib = _load(LIBRARY_PATH)
BACKEND = lib.kvpool_backend().decode()

# The torch device types the library serves, and each one's KVPOOL_DEVICE_*
# code: CPU tensors in every build; GPU tensors ("cuda", under ROCm's PyTorch
# as well) in a CUDA or HIP build, beside them in the same process.
_DEVICE_CODES = {"cpu": 0, "cuda": 1}
DEVICE_CODES = {kind: code for kind, code in _DEVICE_CODES.items() if lib.kvpool_serves(code)}

# A Python exception raised inside a callback (KV move, completion query) that
# the C API reported as a failed callback; re-raised when the call returns.
_callback_errors = threading.local()


def note_callback_exception(exc):
    if getattr(_callback_errors, "exc", None) is None:
        _callback_errors.exc = exc


def raise_status(status):
    """Raises the exception for a failed C API status (the hot paths test ``if status:`` first)."""
    pending = getattr(_callback_errors, "exc", None)
    _callback_errors.exc = None
    if status == CALLBACK_FAILED and pending is not None:
        raise pending
    message = lib.kvpool_last_error().decode(errors="replace")
    cls = errors.BY_CODE.get(status, errors.KVPoolError)
    raise cls(message, status)


def check(status):
    if status:
        raise_status(status)
