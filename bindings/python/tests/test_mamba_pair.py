"""The Mamba pair (UnifiedMambaTokenToKVPoolAllocator) with the hybrid request table
drawing state slots from it, driven as an engine serving a hybrid model: admit
(request slot + state slot), prefill, decode, finish, flush; KV and state data
stamped and found through translation after every step."""

from types import SimpleNamespace

import pytest
import torch

from kvpool.sglang import (
    HybridReqToTokenPool,
    UnifiedMambaSlotAllocator,
    UnifiedMambaTokenToKVPoolAllocator,
)
from support import FakeEvent, Stamped, check_all, mamba_pool, mamba_stores, rng_for


def new_req(rid):
    return SimpleNamespace(
        rid=rid,
        req_pool_idx=None,
        mamba_pool_idx=None,
        mamba_ping_pong_track_buffer=None,
        mamba_next_track_idx=None,
        inflight_middle_chunks=0,
        kv_committed_len=0,
        tokens=[],
    )


class MambaWorld:
    def __init__(
        self, device, page_size, lazy, store_kind, extra_buffer=False, total_bytes=1 << 17
    ):
        self.ps = page_size
        self.pool = mamba_pool(device, page_size, total_bytes)
        kv, full_store, state_store = mamba_stores(store_kind, self.pool, page_size, device)
        self.alloc = UnifiedMambaTokenToKVPoolAllocator(
            unified_buffer=self.pool,
            kvcache=kv,
            device=device,
            page_size=page_size,
            lazy_compaction=lazy,
        )
        self.device = self.alloc.device
        self.reqs = HybridReqToTokenPool(
            size=12,
            max_context_len=256,
            device=device,
            enable_mamba_extra_buffer=extra_buffer,
            unified_buffer=self.pool,
        )
        # Wired after construction, as the reference's factory does.
        self.reqs.mamba_allocator = UnifiedMambaSlotAllocator(
            self.alloc.mamba_allocator, max_size=self.pool.max_slots("mamba") - 1, device=device
        )
        self.full = Stamped(self.alloc.full_attn_allocator, full_store)
        self.state = Stamped(self.alloc.mamba_allocator, state_store)
        self.running = []

    def state_slots(self, req):
        slots = [int(req.mamba_pool_idx)]
        if req.mamba_ping_pong_track_buffer is not None:
            slots += [int(s) for s in req.mamba_ping_pong_track_buffer.tolist() if s >= 0]
        return slots

    def prefill(self, req, n, rng):
        """Stamps the state of a request the table just admitted and prefills n tokens;
        without room for them, releases the request again. Returns whether it runs."""
        slots = self.state_slots(req)
        self.state.stamp(slots, rng)
        prefix, seq = torch.tensor([0]), torch.tensor([n])
        out = self.alloc.alloc_extend(
            prefix.to(self.device),
            prefix,
            seq.to(self.device),
            seq,
            torch.tensor([-1], device=self.device),
            n,
        )
        if out is None:
            self.reqs.free_mamba_cache(req)
            self.reqs.free(req)
            self.state.forget(slots)
            return False
        req.tokens = out.tolist()
        self.reqs.write((req.req_pool_idx, slice(0, n)), out)
        self.full.stamp(req.tokens, rng)
        self.running.append(req)
        return True

    def check(self, what):
        check_all(
            self.alloc.full_attn_allocator,
            [t for r in self.running for t in r.tokens],
            self.full,
            what,
        )
        check_all(
            self.alloc.mamba_allocator,
            [s for r in self.running for s in self.state_slots(r)],
            self.state,
            what,
        )
        self.reqs.check_invariants()
        for r in self.running:
            row = self.reqs.req_to_token[r.req_pool_idx, : len(r.tokens)].tolist()
            assert row == r.tokens, f"{what}: request table row of {r.rid} differs"
            assert int(
                self.reqs.get_mamba_indices(torch.tensor([r.req_pool_idx], device=self.device))[0]
            ) == int(r.mamba_pool_idx)


def step(w, rng, lazy, i):
    a = w.alloc
    op = rng.choices(
        ["admit", "decode", "finish", "flush", "events"], [3, 4, 2, 2 if lazy else 0, 1]
    )[0]
    what = f"step {i} ({op})"
    if op == "admit":
        req = new_req(i)
        cost = a.mamba_slot_full_token_cost()
        assert cost == -(
            -a.mamba_allocator.entry_bytes_per_page // a.full_attn_allocator.entry_bytes
        )
        if w.reqs.alloc([req]) is None:
            assert req.req_pool_idx is None and req.mamba_pool_idx is None
            return
        if not w.prefill(req, rng.randint(1, 3 * w.ps), rng):
            w.check(what)
            return
    elif op == "decode" and w.running:
        batch = rng.sample(w.running, rng.randint(1, len(w.running)))
        seq = torch.tensor([len(r.tokens) + 1 for r in batch])
        last = torch.tensor([r.tokens[-1] for r in batch], device=w.device)
        out = a.alloc_decode(seq.to(w.device), seq, last)
        if out is None:
            return
        for r, t in zip(batch, out.tolist()):
            w.reqs.write((r.req_pool_idx, len(r.tokens)), torch.tensor(t))
            r.tokens.append(t)
        w.full.stamp(out.tolist(), rng)
    elif op == "finish" and w.running:
        req = w.running.pop(rng.randrange(len(w.running)))
        slots = w.state_slots(req)
        a.free(torch.tensor(req.tokens, device=w.device))
        w.full.forget(req.tokens)
        w.reqs.free_mamba_cache(req)
        w.state.forget(slots)
        w.reqs.free(req)
    elif op == "flush":
        a.flush_opportunistic()
    elif op == "events":
        event = FakeEvent(done=rng.random() < 0.5, polls=rng.randint(0, 4))
        a.set_latest_forward_done_event(event)
        if w.running:
            a.set_inflight_forward(event, torch.tensor(w.running[0].tokens, device=w.device))
    w.check(what)


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("store_kind", ["unified", "engine"])
def test_mamba_pair_serving_workload(device, seed, lazy, page_size, store_kind):
    rng = rng_for(seed * 100 + page_size + 7 * lazy)
    w = MambaWorld(
        device, page_size, lazy, store_kind, extra_buffer=seed % 2 == 0, total_bytes=1 << 15
    )
    for i in range(120):
        step(w, rng, lazy, i)


def test_state_slot_cost_and_sizes(device):
    w = MambaWorld(device, 4, False, "unified")
    a = w.alloc
    assert (
        a.size_full == w.pool.max_slots("full") - 1
        and a.size_mamba == w.pool.max_slots("mamba") - 1
    )
    before = a.available_size()
    req = new_req(0)
    w.reqs.alloc([req])
    # One state slot takes its bytes out of the full side's room.
    assert before - a.available_size() <= a.mamba_slot_full_token_cost() + 4
    assert a.available_size() < before
    assert a.size == a.available_size() + a.full_attn_allocator.allocated_count()
    assert not a.state_slot_starved()
    assert w.reqs.translate_mamba_indices(req.mamba_pool_idx.view(1)).dtype == torch.int32


def test_hybrid_request_table_ping_pong(device):
    w = MambaWorld(device, 1, False, "unified", extra_buffer=True)
    req = new_req(0)
    assert w.reqs.alloc([req]) == [req.req_pool_idx]
    assert req.mamba_needs_clear and req.mamba_next_track_idx == 0
    tracks = req.mamba_ping_pong_track_buffer.tolist()
    assert len(tracks) == 2 and -1 not in tracks and int(req.mamba_pool_idx) not in tracks
    fresh = w.alloc.mamba_allocator.alloc(1)
    donated = w.reqs.donate_mamba_ping_pong_slot(req, fresh)
    assert (
        donated.shape == (1,) and int(donated) == tracks[w.reqs.get_mamba_ping_pong_keep_idx(req)]
    )
    assert int(fresh[0]) in req.mamba_ping_pong_track_buffer.tolist()
    w.reqs.check_invariants()
    # The donated slot is the caller's now; free everything.
    w.alloc.mamba_allocator.free(donated)
    w.reqs.free_mamba_cache(req)
    with pytest.raises(AssertionError):
        w.reqs.free_mamba_cache(req)
    w.reqs.free(req)
    assert w.alloc.mamba_allocator.allocated_count() == 0
    w.reqs.check_invariants()


def test_request_slot_with_state_cannot_be_freed(device):
    w = MambaWorld(device, 1, False, "unified")
    req = new_req(0)
    w.reqs.alloc([req])
    with pytest.raises(Exception) as err:
        w.reqs.free(req)
    assert "free_mamba_cache" in str(err.value)
    w.reqs.free_mamba_cache(req)
    w.reqs.free(req)
    w.reqs.check_invariants()


def test_lazy_extra_buffer_fills_track_slots_on_demand(device):
    w = MambaWorld(device, 1, False, "unified")
    reqs = HybridReqToTokenPool(
        size=4,
        max_context_len=8,
        device=device,
        enable_mamba_extra_buffer=True,
        enable_mamba_extra_buffer_lazy=True,
        mamba_allocator=w.alloc.mamba_allocator,
    )
    req = new_req(0)
    reqs.alloc([req])
    first, second = req.mamba_ping_pong_track_buffer.tolist()
    assert first >= 0 and second == -1
    assert reqs.get_mamba_ping_pong_keep_idx(req) == 0  # lazy: the tracked state stays in place
    held = w.alloc.mamba_allocator.allocated_count()
    assert reqs.alloc_mamba_ping_pong_slot(req, 1)
    assert w.alloc.mamba_allocator.allocated_count() == held + 1
    filled = int(req.mamba_ping_pong_track_buffer[1])
    assert filled >= 0 and filled not in (first, int(req.mamba_pool_idx))
    # Putting a slot of the caller's at index 1 hands the one there to the caller.
    mine = w.alloc.mamba_allocator.alloc(1)
    reqs.set_mamba_ping_pong_slot(req, 1, mine[0])
    assert int(req.mamba_ping_pong_track_buffer[1]) == int(mine[0])
    assert int(reqs.req_index_to_mamba_ping_pong_track_buffer_mapping[req.req_pool_idx, 1]) == int(
        mine[0]
    )
    reqs.check_invariants()
    w.alloc.mamba_allocator.free(torch.tensor([filled]))
    reqs.free_mamba_cache(req)
    reqs.free(req)
    assert w.alloc.mamba_allocator.allocated_count() == 0
    reqs.check_invariants()
