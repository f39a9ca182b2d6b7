"""Device failures injected through the seam at every device operation of a
call: the call raises RuntimeFailure, the pair is as before, and the same call
then succeeds as it does on a twin that saw no fault."""

from types import SimpleNamespace

import pytest

from kvpool import device_faults, errors
from kvpool.sglang import HybridReqToTokenPool, UnifiedMambaTokenToKVPoolAllocator
from support import mamba_pool, mamba_stores, swa_allocator


def pair(device, lazy, page_size):
    a = swa_allocator(device, page_size, lazy)
    ids = a.alloc(16 * page_size)
    a.free(ids[2 * page_size : 6 * page_size].clone())
    return a, ids


def state(a):
    full, swa = a.full_attn_allocator, a.swa_attn_allocator
    return (
        a.available_size(),
        full.allocated_count(),
        swa.allocated_count(),
        full.virtual_to_physical.cpu().tolist(),
        swa.virtual_to_physical.cpu().tolist(),
        full.physical_to_virtual.cpu().tolist(),
        swa.physical_to_virtual.cpu().tolist(),
    )


CALLS = {
    "alloc": lambda a, ids, ps: a.alloc(3 * ps),
    "free": lambda a, ids, ps: a.free(ids[-2 * ps :].clone()),
    "free_swa": lambda a, ids, ps: a.free_swa(ids[-2 * ps :].clone()),
}


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_device_fault_leaves_the_pair_as_it_was(device, lazy, page_size, call):
    run = CALLS[call]
    tried = 0
    for kind in device_faults.KINDS:
        dry, dry_ids = pair(device, lazy, page_size)
        device_faults.reset()
        run(dry, dry_ids, page_size)
        ops = device_faults.count(kind)
        for n in range(1, ops + 1):
            a, ids = pair(device, lazy, page_size)
            twin, twin_ids = pair(device, lazy, page_size)
            before = state(a)
            device_faults.reset()
            device_faults.fail_nth(kind, n)
            try:
                with pytest.raises(errors.RuntimeFailure, match="failed: "):
                    run(a, ids, page_size)
            finally:
                device_faults.reset()
            after = state(a)
            allowed = [before]
            if call == "free" and not lazy:
                # The SWA side's eager compaction stays when the full side's part fails.
                other, other_ids = pair(device, lazy, page_size)
                other.free_swa(other_ids[-2 * page_size :].clone())
                allowed.append(state(other))
            assert after in allowed, f"{kind} {n} of {ops}"
            run(a, ids, page_size)
            run(twin, twin_ids, page_size)
            assert state(a) == state(twin)
            tried += 1
    assert tried > 0


def request_table(device, lazy):
    """A hybrid request table on a Mamba pair's state side, two requests holding state."""
    pool = mamba_pool(device, 1)
    kv, _, _ = mamba_stores("unified", pool, 1, device)
    pair = UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=pool, kvcache=kv, device=device, page_size=1, lazy_compaction=False
    )
    reqs = HybridReqToTokenPool(
        size=4,
        max_context_len=8,
        device=device,
        enable_mamba_extra_buffer=True,
        enable_mamba_extra_buffer_lazy=lazy,
        mamba_allocator=pair.mamba_allocator,
    )
    reqs.alloc(
        [
            SimpleNamespace(
                rid=i,
                req_pool_idx=None,
                mamba_pool_idx=None,
                mamba_ping_pong_track_buffer=None,
                mamba_next_track_idx=None,
            )
            for i in range(2)
        ]
    )
    return pair, reqs


def table_state(pair, reqs):
    return (
        reqs.available_size(),
        pair.mamba_allocator.allocated_count(),
        reqs.req_index_to_mamba_index_mapping.cpu().tolist(),
        reqs.req_index_to_mamba_ping_pong_track_buffer_mapping.cpu().tolist(),
        pair.mamba_allocator.virtual_to_physical.cpu().tolist(),
    )


@pytest.mark.parametrize("lazy", [False, True])
def test_a_device_fault_in_a_request_table_clear_changes_nothing(device, lazy):
    # The table's clear clears the state side (a transaction of its own) and the
    # device maps inside the side's transaction: a fault anywhere undoes both.
    tried = 0
    for kind in device_faults.KINDS:
        _, dry = request_table(device, lazy)
        device_faults.reset()
        dry.clear()
        ops = device_faults.count(kind)
        for n in range(1, ops + 1):
            pair, reqs = request_table(device, lazy)
            before = table_state(pair, reqs)
            device_faults.reset()
            device_faults.fail_nth(kind, n)
            try:
                with pytest.raises(errors.RuntimeFailure, match="failed: "):
                    reqs.clear()
            finally:
                device_faults.reset()
            assert table_state(pair, reqs) == before, f"{kind} {n} of {ops}"
            reqs.check_invariants()
            pair.mamba_allocator.check_invariants()
            reqs.clear()
            assert reqs.available_size() == 4
            assert pair.mamba_allocator.allocated_count() == 0
            assert set(reqs.req_index_to_mamba_index_mapping.cpu().tolist()) == {0}
            reqs.check_invariants()
            tried += 1
    assert tried > 0


def test_the_seam_refuses_bad_kinds_and_positions():
    with pytest.raises(ValueError):
        device_faults.fail_nth("memcpy", 1)
    with pytest.raises(errors.InvalidArgumentError):
        device_faults.fail_nth("launch", 0)
    device_faults.reset()
    assert all(device_faults.count(k) == 0 for k in device_faults.KINDS)
