"""Bad arguments raise kvpool errors (AssertionErrors where the reference asserts)
and change nothing; forward-done markers are any object with .query()."""

import ctypes

import pytest
import torch

import kvpool
from kvpool import errors
from kvpool.sglang import UnifiedSWATokenToKVPoolAllocator
from support import FakeEvent, swa_allocator, swa_pool


def pair(device, lazy=True, page_size=1):
    return swa_allocator(device, page_size, lazy)


def state(a):
    return (
        a.available_size(),
        a.full_attn_allocator.allocated_count(),
        a.full_attn_allocator.virtual_to_physical.clone(),
        a.swa_attn_allocator.virtual_to_physical.clone(),
    )


def same(s1, s2):
    return s1[:2] == s2[:2] and torch.equal(s1[2], s2[2]) and torch.equal(s1[3], s2[3])


def test_bad_tensors_are_refused(device):
    a = pair(device, lazy=False, page_size=4)
    ids = a.alloc(8)
    before = state(a)
    seq = torch.tensor([9])
    bad_calls = {
        "last_loc int32": lambda: a.alloc_decode(
            seq, seq, torch.tensor([ids[7]], dtype=torch.int32, device=ids.device)
        ),
        "last_loc wrong device": lambda: a.alloc_decode(
            seq, seq, torch.empty(1, dtype=torch.int64, device="meta")
        ),
        "last_loc not contiguous": lambda: a.alloc_decode(
            torch.tensor([9, 9]), torch.tensor([9, 9]), ids[3::4]
        ),
        "last_loc wrong length": lambda: a.alloc_decode(seq, seq, ids[:2].clone()),
        "lengths differ": lambda: a.alloc_extend(
            None, torch.tensor([0, 0]), None, torch.tensor([4]), ids[:1], 4
        ),
        "float ids": lambda: a.free(torch.tensor([1.5])),
        "translate floats": lambda: a.translate_kv_loc(ids.double()),
        "out wrong dtype": lambda: a.translate_kv_loc(
            ids, out=torch.empty(8, dtype=torch.int32, device=ids.device)
        ),
        "swa out wrong dtype": lambda: a.translate_loc_from_full_to_swa(
            ids, out=torch.empty_like(ids)
        ),
        "foreign ids": lambda: a.free(torch.tensor([10**9])),
        "misaligned": lambda: a.alloc(6),
    }
    for name, call in bad_calls.items():
        with pytest.raises(AssertionError) as err:
            call()
        assert isinstance(err.value, kvpool.KVPoolError), name
        assert same(before, state(a)), f"{name} changed the allocator"
    a.check_invariants()


def test_error_carries_code_and_message(device):
    a = pair(device)
    ids = a.alloc(4)
    a.free(ids)
    with pytest.raises(errors.NotAllocatedError) as err:
        a.free(ids)
    assert err.value.code == errors.NotAllocatedError.code
    assert "not allocated" in err.value.message and str(ids[0].item()) in err.value.message


@pytest.mark.parametrize("other", ["cuda", "meta"])
def test_a_device_the_library_does_not_serve_is_refused(other):
    if other in kvpool.devices():
        pytest.skip(f"this library serves {other}")
    with pytest.raises(errors.InvalidArgumentError) as err:
        swa_pool(other, 1)
    assert f"device '{other}' is not one of them" in err.value.message
    assert "serves CPU" in err.value.message


@pytest.mark.parametrize("vendor", ["cuda", "hip"])
def test_a_device_event_of_another_backend_or_null_is_refused(vendor):
    """A vendor's event makes a token only in a library built for that vendor, and only if set."""
    from kvpool._lib import BACKEND, RELEASE_FN, lib

    make = getattr(lib, f"kvpool_completion_token_from_{vendor}_event")
    handle = ctypes.c_void_p()
    event = 0xE7E7 if BACKEND != vendor else None
    status = make(event, RELEASE_FN(), None, ctypes.byref(handle))
    assert status == errors.InvalidArgumentError.code
    message = lib.kvpool_last_error().decode()
    if BACKEND != vendor:
        assert f"built for {BACKEND}, not {vendor}" in message
    else:
        assert "event is NULL" in message
    assert handle.value is None


def test_forward_markers_with_query(device):
    """A flush leaves the pages the in-flight forward writes in place until its marker says done."""
    a = pair(device)
    ids = a.alloc(64)
    top = ids[56:]
    event = FakeEvent(done=False)
    a.set_latest_forward_done_event(event)
    a.set_inflight_forward(event, top)
    a.free(ids[8:40])
    where = a.translate_kv_loc(top).clone()
    a.flush_opportunistic()
    assert torch.equal(a.translate_kv_loc(top), where), "a page the forward writes moved"
    event.done = True
    assert a.flush_opportunistic() > 0
    assert not torch.equal(a.translate_kv_loc(top), where)
    a.set_latest_forward_done_event(None)
    a.check_invariants()


def test_a_failing_query_is_raised(device):
    class Broken:
        def query(self):
            raise ValueError("engine event broke")

    a = pair(device)
    ids = a.alloc(64)
    a.set_latest_forward_done_event(Broken())
    a.set_inflight_forward(Broken(), ids[:4])
    a.free(ids[4:30])
    with pytest.raises(ValueError, match="engine event broke"):
        a.flush_opportunistic()
    a.set_latest_forward_done_event(None)
    a.set_inflight_forward(None, None)
    a.check_invariants()


def test_a_failing_kv_move_is_raised_and_the_tables_stay_consistent(device):
    class BrokenKV:
        def move_kv_cache(self, tgt, src):
            raise RuntimeError("engine move broke")

    class Cache:
        full_kv_pool = BrokenKV()
        swa_kv_pool = BrokenKV()

    pool = swa_pool(device, 1, 1 << 15)
    a = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=Cache(),
        device=device,
        full_max_total_num_tokens=10000,
        swa_max_total_num_tokens=10000,
    )
    ids = a.alloc(16)
    with pytest.raises(RuntimeError, match="engine move broke"):
        a.free(ids[:4])
    a.check_invariants()
    assert a.full_attn_allocator.allocated_count() == 12
