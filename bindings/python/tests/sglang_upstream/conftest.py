"""SGLang's own unit tests, run unchanged against kvpool.sglang: the drop-in's acceptance check.

The test files in this folder are copied from SGLang (bytedance-iaas/sglang at 6ed5780c4f,
test/registered/unit/mem_cache/) without an edit. Their imports of
``sglang.srt.mem_cache.multi_ended_allocator`` and ``sglang.srt.mem_cache.unified_memory_pool``
resolve to ``kvpool.sglang`` here, as an engine's would after changing its import.

The tests listed in INTERNALS reach into the reference's private state or replace its Triton
kernels and internal steps; kvpool has neither (its state lives in the C++ core, its kernels
are native). They are expected to fail with the error named, strictly: one that starts to
pass fails the suite, so the list cannot outlive its reason."""

import sys
import types

import pytest

import kvpool.sglang


def _install_sglang_modules():
    def module(name, **attributes):
        m = types.ModuleType(name)
        m.__path__ = []
        m.__dict__.update(attributes)
        sys.modules[name] = m
        return m

    ci_register = module("sglang.test.ci.ci_register", register_cpu_ci=lambda **_: None)
    ci = module("sglang.test.ci", ci_register=ci_register)
    test = module("sglang.test", ci=ci)
    mem_cache = module(
        "sglang.srt.mem_cache",
        multi_ended_allocator=kvpool.sglang,
        unified_memory_pool=kvpool.sglang,
    )
    sys.modules["sglang.srt.mem_cache.multi_ended_allocator"] = kvpool.sglang
    sys.modules["sglang.srt.mem_cache.unified_memory_pool"] = kvpool.sglang
    srt = module("sglang.srt", mem_cache=mem_cache)
    module("sglang", srt=srt, test=test)


_install_sglang_modules()

_PRIVATE_STATE = (
    "reads the reference's private host state (hole list, pending-reuse batches, frontiers)"
)
_TRITON_STUB = (
    "replaces the reference's Triton alloc kernels, module attributes kvpool does not have"
)

# test id (class::method, or class for all its tests) -> (reason, the error it fails with)
INTERNALS = {
    "TestUnifiedSWATokenToKVPoolAllocator::test_swa_alloc_swa_failure_is_fail_loud": (
        "replaces the SWA side's alloc_with_virtual; kvpool's composite binds both sides in one "
        "native call, which an internal inconsistency fails loudly from C++",
        AssertionError,
    ),
    "TestPagedMultiEndedAllocator::test_paged_alloc_decode_binds_v2p_p2v_on_page_wrap": (
        _TRITON_STUB,
        AttributeError,
    ),
    "TestPagedMultiEndedAllocator::test_paged_alloc_decode_no_op_when_no_new_page": (
        _TRITON_STUB,
        AttributeError,
    ),
    "TestPagedMultiEndedAllocator::test_paged_alloc_extend_binds_v2p_p2v": (
        _TRITON_STUB,
        AttributeError,
    ),
    "TestPagedMultiEndedAllocator::test_paged_swa_joint_byte_budget": (
        _PRIVATE_STATE,
        AttributeError,
    ),
    "TestPagedMultiEndedAllocator::test_paged_take_physical_overflow_check": (
        "calls take_physical, the reference's step that takes pages without binding them; "
        "kvpool takes and binds in one call",
        AttributeError,
    ),
    "TestLazyCompaction::test_lazy_available_size_includes_holes": (_PRIVATE_STATE, AttributeError),
    "TestLazyCompaction::test_lazy_flush_compacts_holes_into_gap": (_PRIVATE_STATE, AttributeError),
    "TestLazyCompaction::test_lazy_free_boundary_shortcut": (_PRIVATE_STATE, AttributeError),
    "TestLazyCompaction::test_lazy_free_inward_walk": (_PRIVATE_STATE, AttributeError),
    "TestLazyCompaction::test_lazy_non_urgent_read_race_uses_pending_reuse": (
        _PRIVATE_STATE,
        AttributeError,
    ),
    "TestLazyCompaction::test_lazy_non_urgent_stops_at_write_set_blocker": (
        _PRIVATE_STATE,
        AttributeError,
    ),
    "TestLazyCompaction::test_lazy_take_physical_drains_holes_first": (
        _PRIVATE_STATE,
        AttributeError,
    ),
    # CUDA only (skipped elsewhere): drives _alloc_bind_fast_or_slow, the Triton fused path.
    "TestO3FusedAllocBind": (
        "drives _alloc_bind_fast_or_slow and the hole list, the reference's Triton fused path",
        AttributeError,
    ),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "sglang_upstream" not in item.nodeid:
            continue
        parts = item.nodeid.split("::")
        for key in ("::".join(parts[-2:]), parts[-2]):
            if key in INTERNALS:
                reason, error = INTERNALS[key]
                item.add_marker(pytest.mark.xfail(reason=reason, raises=error, strict=True))
                break
