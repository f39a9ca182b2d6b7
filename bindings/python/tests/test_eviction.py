"""The eviction callback of the SWA pair, the Mamba pair and the tri-pool (kvpool.sglang's
composites: ``eviction_callback=`` and ``set_eviction_callback``; kvpool.native's pairs).

Randomised: two engines over the same buffer run the same requests (admissions with their
state slots, finishes into a prefix cache or straight to free, cache hits); one evicts the
least recently used cached request through the callback, the other by its own loop (try,
evict one, try again). Every allocation's outcome and ids must agree, and so must the
evictions it took; both end with check_invariants, the tables and the data check. Then the
rules: an exception in the callback reaches the caller with nothing changed, allocating
from inside the callback is refused, a callback that frees nothing leaves the allocation
failed."""

import pytest
import torch

from kvpool import errors, native
from kvpool.sglang import (
    UnifiedMambaSWATokenToKVPoolAllocator,
    UnifiedMambaTokenToKVPoolAllocator,
    UnifiedSWATokenToKVPoolAllocator,
)
from support import (
    Stamped,
    check_all,
    mamba_pool,
    mamba_stores,
    rng_for,
    swa_pool,
    swa_stores,
    tri_pool,
    tri_pool_stores,
)

PS = 4


class Engine:
    """A composite of one kind with a prefix cache of finished requests (oldest first)."""

    def __init__(self, kind, device, total_bytes, lazy, with_callback):
        self.kind = kind
        if kind == "swa":
            pool = swa_pool(device, PS, total_bytes)
            kv, full, _swa = swa_stores("unified", pool, 0, 0, PS, device)
            self.alloc = UnifiedSWATokenToKVPoolAllocator(
                unified_buffer=pool,
                kvcache=kv,
                device=device,
                full_max_total_num_tokens=1 << 20,
                swa_max_total_num_tokens=1 << 20,
                page_size=PS,
                lazy_compaction=lazy,
                eviction_callback=self.evict if with_callback else None,
            )
            state = None
        elif kind == "mamba":
            pool = mamba_pool(device, PS, total_bytes)
            kv, full, state = mamba_stores("unified", pool, PS, device)
            self.alloc = UnifiedMambaTokenToKVPoolAllocator(
                unified_buffer=pool,
                kvcache=kv,
                device=device,
                page_size=PS,
                lazy_compaction=lazy,
                eviction_callback=self.evict if with_callback else None,
            )
        else:
            pool = tri_pool(device, PS, total_bytes)
            kv, full, _swa, state = tri_pool_stores("unified", pool, PS, device)
            self.alloc = UnifiedMambaSWATokenToKVPoolAllocator(
                unified_buffer=pool,
                kvcache=kv,
                device=device,
                page_size=PS,
                lazy_compaction=lazy,
                eviction_callback=self.evict if with_callback else None,
            )
        self.with_callback = with_callback
        self.full = Stamped(self.alloc.full_attn_allocator, full)
        self.state = Stamped(self.alloc.mamba_allocator, state) if state is not None else None
        self.running, self.cache = [], []  # (tokens, slot) each
        self.evictions = self.calls = 0
        self.shortfalls = []

    def evict(self, shortfall):
        self.calls += 1
        self.shortfalls.append(shortfall)
        return 64 if self.evict_one() else 0

    def evict_one(self):
        if not self.cache:
            return False
        tokens, slot = self.cache.pop(0)
        self.release(tokens, slot)
        self.evictions += 1
        return True

    def release(self, tokens, slot):
        self.alloc.free(torch.tensor(tokens, dtype=torch.int64, device=self.alloc.device))
        self.full.forget(tokens)
        if slot is not None:
            self.alloc.mamba_allocator.free(
                torch.tensor([slot], dtype=torch.int64, device=self.alloc.device)
            )
            self.state.forget([slot])

    def _try(self, allocate):
        got = allocate()
        if not self.with_callback:
            while got is None and self.evict_one():
                got = allocate()
        return got

    def admit(self, tokens, rng):
        """A new request: its state slot, then its KV (tokens rounded up to pages)."""
        slot = None
        if self.state is not None:
            got = self._try(lambda: self.alloc.mamba_allocator.alloc(1))
            if got is None:
                return None
            slot = int(got[0])
            self.state.stamp([slot], rng)
        need = -(-tokens // PS) * PS
        got = self._try(lambda: self.alloc.alloc(need))
        if got is None:
            if slot is not None:
                self.alloc.mamba_allocator.free(
                    torch.tensor([slot], dtype=torch.int64, device=self.alloc.device)
                )
                self.state.forget([slot])
            return None
        ids = got.tolist()
        self.full.stamp(ids, rng)
        self.running.append((ids, slot))
        return ids, slot

    def live_tokens(self):
        return [t for tokens, _ in self.running + self.cache for t in tokens]

    def check(self):
        check_all(self.alloc.full_attn_allocator, self.live_tokens(), self.full, "full")
        if self.state is not None:
            self.state.check("state")
        self.alloc.check_invariants()


@pytest.mark.parametrize("kind", ["swa", "mamba", "tri"])
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_callback_matches_the_engines_own_loop(device, seed, kind, lazy):
    rng_a, rng_b, ops = rng_for(seed), rng_for(seed), rng_for(seed * 7919 + 1)
    total = (1 << 14) + ops.randrange(0, 1 << 13)
    a = Engine(kind, device, total, lazy, True)
    b = Engine(kind, device, total, lazy, False)
    evicting = 0
    for step in range(300):
        u = ops.random()
        if u < 0.45 or not a.running:
            tokens = ops.randrange(1, 12 * PS)
            before = a.evictions
            got_a, got_b = a.admit(tokens, rng_a), b.admit(tokens, rng_b)
            assert got_a == got_b, f"step {step}: admit {tokens}"
            if got_a is None:
                assert not a.cache, f"step {step}: failed while requests were cached"
            evicting += a.evictions > before
        elif u < 0.85:
            i = ops.randrange(len(a.running))
            to_cache = ops.random() < 0.8
            for e in (a, b):
                r = e.running.pop(i)
                if to_cache:
                    e.cache.append(r)
                else:
                    e.release(*r)
        elif a.cache:
            i = ops.randrange(len(a.cache))
            for e in (a, b):
                e.running.append(e.cache.pop(i))
        assert (a.evictions, len(a.cache), len(a.running)) == (
            b.evictions,
            len(b.cache),
            len(b.running),
        ), f"step {step}"
        if step % 100 == 99:
            a.check()
            b.check()
    a.check()
    b.check()
    assert evicting > 0, "the run never evicted"
    assert a.calls >= a.evictions
    sides = {"full", "swa", "mamba"}
    assert all(s.side in sides and s.pages >= 1 and s.bytes > 0 for s in a.shortfalls)


def test_an_exception_in_the_callback_reaches_the_caller(device):
    e = Engine("swa", device, 1 << 14, False, False)
    rng = rng_for(1)
    while e.admit(4 * PS, rng) is not None:
        pass
    before = e.alloc.available_size()

    def broken(_shortfall):
        raise ValueError("the engine's cache is gone")

    e.alloc.set_eviction_callback(broken)
    with pytest.raises(ValueError, match="cache is gone"):
        e.alloc.alloc(4 * PS)
    assert e.alloc.available_size() == before
    e.check()


def test_allocating_from_inside_the_callback_is_refused(device):
    e = Engine("tri", device, 1 << 14, True, False)
    rng = rng_for(2)
    while e.admit(4 * PS, rng) is not None:
        pass
    seen = []

    def allocates(_shortfall):
        with pytest.raises(errors.InvalidStateError):
            e.alloc.alloc(PS)
        seen.append(True)
        return False

    e.alloc.set_eviction_callback(allocates)
    assert e.alloc.alloc(4 * PS) is None
    assert seen == [True]
    e.alloc.set_eviction_callback(None)
    assert e.alloc.alloc(4 * PS) is None
    assert seen == [True]
    e.check()


def test_state_slot_short_evicts_full_kv(device):
    """Mamba pair (kvpool.native): the state side is short; the callback frees full KV."""
    pool = mamba_pool(device, PS, 1 << 13)
    pair = native.UnifiedMambaAllocator(
        pool._native_for({"full": PS, "mamba": 1}), native.allocator_options(), native.allocator_options()
    )
    held = []
    while (ids := pair.alloc(PS)) is not None:
        held.append(ids)
    assert pair.alloc_state_slots(1) is None
    told = []

    def frees_full(shortfall):
        told.append(shortfall)
        if not held:
            return 0
        pair.full.free(held.pop())
        return True

    pair.set_eviction_callback(frees_full)
    slots = pair.alloc_state_slots(1)
    assert slots is not None and len(told) >= 1
    assert all(s.side == "mamba" and s.pages == 1 and s.requested_pages == 1 for s in told)
    pair.full.check_invariants()
    pair.state.check_invariants()
