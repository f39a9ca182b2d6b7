"""The tri-pool (UnifiedMambaSWATokenToKVPoolAllocator: Mamba state slots up, sliding-window
KV floating, full KV down, in one buffer), driven as an engine serving a model with all
three kinds of state drives it: admit (a state slot per request, then its prefill),
chunked prefill, decode, window eviction with free_swa, speculative decoding in a backup
window, finish (alone or in a free group), opportunistic flushes and forward events. KV
and state bytes are stamped per virtual id when allocated and found through translate
after every step; a refused allocation must lie beyond what the tri-pool promised."""

import pytest
import torch

from kvpool import errors, native
from kvpool.sglang import UnifiedKVPool, UnifiedMambaSWATokenToKVPoolAllocator
from support import (
    FakeEvent,
    Stamped,
    check_all,
    mamba_spec,
    mha_spec,
    rng_for,
    tri_pool,
    tri_pool_stores,
)

WINDOW = 24  # the sliding window, in tokens
PROMPT = 48  # the longest prefill chunk, in tokens


class Request:
    def __init__(self, slot):
        self.slot = slot  # its Mamba state slot
        self.tokens = []  # its virtual token ids, in order
        self.swa_freed = 0  # leading tokens whose sliding-window pages are released


class TriWorld:
    """swa_page_size: the SWA side's own page size (None: page_size), the grain of free_swa."""

    def __init__(
        self,
        device,
        page_size,
        lazy,
        store_kind,
        total_bytes=1 << 15,
        float_at=0.5,
        swa_page_size=None,
    ):
        self.ps = page_size
        self.swa_ps = swa_page_size or page_size
        self.lazy = lazy
        self.pool = tri_pool(device, page_size, total_bytes, float_at)
        kv, full_store, swa_store, state_store = tri_pool_stores(
            store_kind, self.pool, page_size, device, swa_page_size
        )
        self.alloc = UnifiedMambaSWATokenToKVPoolAllocator(
            unified_buffer=self.pool,
            kvcache=kv,
            device=device,
            page_size=page_size,
            lazy_compaction=lazy,
            swa_page_size=swa_page_size,
        )
        self.device = self.alloc.device
        self.full = Stamped(self.alloc.full_attn_allocator, full_store)
        self.swa = Stamped(self.alloc.swa_attn_allocator, swa_store)
        self.state = Stamped(self.alloc.mamba_allocator, state_store)
        self.engine_stores = [
            s for s in (full_store, swa_store, state_store) if hasattr(s, "calls")
        ]
        self.running = {}  # request id -> Request
        self.next_id = 0
        self.refused = 0

    def moves(self):
        return sum(len(s.calls) for s in self.engine_stores)

    def live(self):
        return [t for r in self.running.values() for t in r.tokens]

    def swa_live(self):
        """Tokens bound on the SWA side: past the released window, to the end of the last full
        page (a full page binds all its SWA pages, with smaller SWA pages too)."""
        live = []
        for r in self.running.values():
            live += r.tokens[r.swa_freed :]
            if r.tokens:
                live += range(r.tokens[-1] + 1, (r.tokens[-1] // self.ps + 1) * self.ps)
        return live

    def check(self, what):
        a = self.alloc
        check_all(a.full_attn_allocator, self.live(), self.full, what)
        check_all(a.swa_attn_allocator, self.swa_live(), self.swa, what)
        check_all(a.mamba_allocator, [r.slot for r in self.running.values()], self.state, what)
        ps = self.ps
        for rid, r in self.running.items():
            for p, t in enumerate(r.tokens):
                assert (
                    t % ps == p % ps and t // ps == r.tokens[p - p % ps] // ps
                ), f"{what}: request {rid} breaks the page structure at position {p}"
        assert len(set(self.live())) == len(self.live()), f"{what}: a virtual id is live twice"
        assert a.available_size() >= 0 and a.mamba_available_size() >= 0

    def stamp(self, tokens, rng):
        self.full.stamp(tokens, rng)
        self.swa.stamp(tokens, rng)

    def forget(self, tokens):
        self.full.forget(tokens)
        self.swa.forget(tokens)

    def last_loc(self, requests):
        return torch.tensor(
            [r.tokens[-1] if r.tokens else -1 for r in requests],
            dtype=torch.int64,
            device=self.device,
        )

    def ids(self, tokens, rng):
        """Ids to free, as an engine passes them: a device tensor or a CPU one."""
        return torch.tensor(tokens, device=self.device if rng.random() < 0.5 else "cpu")

    def extend(self, requests, grow, rng, what):
        """Prefill: request i grows by grow[i] tokens, in one alloc_extend (or, for one
        request of whole pages with nothing yet, a plain alloc). Checks a refusal against
        available_size(); returns whether it was granted."""
        a = self.alloc
        prefix = [len(r.tokens) for r in requests]
        seq = [p + g for p, g in zip(prefix, grow)]
        need = sum(grow)
        pages = sum(-(-s // self.ps) - -(-p // self.ps) for s, p in zip(seq, prefix))
        room = a.available_size()
        if len(requests) == 1 and prefix == [0] and need % self.ps == 0 and rng.random() < 0.3:
            out = a.alloc(need)
        else:
            prefix_t, seq_t = torch.tensor(prefix), torch.tensor(seq)
            out = a.alloc_extend(
                prefix_t.to(self.device),
                prefix_t,
                seq_t.to(self.device),
                seq_t,
                self.last_loc(requests),
                need,
            )
        if out is None:
            assert pages * self.ps > room, f"{what}: {pages} pages refused with {room} available"
            self.refused += 1
            return False
        assert out.dtype == torch.int64 and out.numel() == need
        ids = out.tolist()
        at = 0
        for r, g in zip(requests, grow):
            r.tokens += ids[at : at + g]
            at += g
        self.stamp(ids, rng)
        return True

    def admit(self, n, rng, what):
        """n new requests: a state slot each, stamped as the first forward writes it, then
        their prefill; without room for it the slots go back."""
        a = self.alloc
        room = a.mamba_available_size()
        slots = a.mamba_allocator.alloc(n)
        if slots is None:
            assert n > room, f"{what}: {n} state slots refused with {room} available"
            self.refused += 1
            return
        slots = slots.tolist()
        self.state.stamp(slots, rng)
        requests = [Request(s) for s in slots]
        if not self.extend(requests, [rng.randint(1, PROMPT) for _ in requests], rng, what):
            a.mamba_allocator.free(torch.tensor(slots))
            self.state.forget(slots)
            return
        for r in requests:
            self.running[self.next_id] = r
            self.next_id += 1

    def finish(self, rids, rng):
        a = self.alloc
        grouped = len(rids) > 1
        if grouped:
            a.free_group_begin()
        for rid in rids:
            r = self.running.pop(rid)
            a.free(self.ids(r.tokens, rng))
            a.mamba_allocator.free(self.ids([r.slot], rng))
            self.forget(r.tokens)
            self.state.forget([r.slot])
        if grouped:
            a.free_group_end()

    def evict_window(self, rng, what):
        """Every request's whole SWA pages that left the window release their
        sliding-window KV; the full KV stays."""
        a = self.alloc
        for r in self.running.values():
            out = (len(r.tokens) - WINDOW) // self.swa_ps * self.swa_ps
            if out <= r.swa_freed:
                continue
            gone = r.tokens[r.swa_freed : out]
            a.free_swa(self.ids(gone, rng))
            r.swa_freed = out
            self.swa.forget(gone)
            gone_t = torch.tensor(gone, device=self.device)
            assert (
                a.translate_loc_from_full_to_swa(gone_t) == 0
            ).all(), f"{what}: released sliding-window tokens do not translate to the sink"
            assert (a.translate_kv_loc(gone_t) > 0).all(), f"{what}: free_swa lost full KV"

    def speculate(self, rng):
        """A draft decode step inside a backup window, then restored (undone on every
        side) or committed."""
        a = self.alloc
        batch = rng.sample(list(self.running.values()), rng.randint(1, len(self.running)))
        counts = [
            s.allocated_count()
            for s in (a.full_attn_allocator, a.swa_attn_allocator, a.mamba_allocator)
        ]
        snapshot = a.backup_state()
        seq = torch.tensor([len(r.tokens) + 1 for r in batch])
        out = a.alloc_decode(seq.to(self.device), seq, self.last_loc(batch))
        if out is not None and rng.random() < 0.5:
            for r, t in zip(batch, out.tolist()):
                r.tokens.append(t)
            self.stamp(out.tolist(), rng)
            a.commit_state(snapshot)
            return
        assert a.restore_state(snapshot) == []
        assert counts == [
            s.allocated_count()
            for s in (a.full_attn_allocator, a.swa_attn_allocator, a.mamba_allocator)
        ]


def step(w, rng, i):
    a = w.alloc
    op = rng.choices(
        ["admit", "extend", "decode", "window", "speculate", "finish", "flush", "events"],
        [3, 1, 4, 2, 1, 2, 2 if w.lazy else 0, 1 if w.lazy else 0],
    )[0]
    what = f"step {i} ({op})"
    running = list(w.running)
    moves_before = w.moves()
    if op == "admit":
        w.admit(rng.randint(1, 3), rng, what)
    elif op in ("extend", "decode") and running:
        batch = [w.running[r] for r in rng.sample(running, rng.randint(1, min(4, len(running))))]
        grow = [1 if op == "decode" else rng.randint(1, PROMPT) for _ in batch]
        if op == "decode":
            seq = torch.tensor([len(r.tokens) + 1 for r in batch])
            room = a.available_size()
            out = a.alloc_decode(seq.to(w.device), seq, w.last_loc(batch))
            if out is None:
                pages = sum(1 for r in batch if len(r.tokens) % w.ps == 0)
                assert pages * w.ps > room, f"{what}: {pages} pages refused with {room} available"
                w.refused += 1
            else:
                for r, t in zip(batch, out.tolist()):
                    r.tokens.append(t)
                w.stamp(out.tolist(), rng)
        else:
            w.extend(batch, grow, rng, what)
    elif op == "window":
        w.evict_window(rng, what)
        if w.lazy:
            assert w.moves() == moves_before, f"{what}: a lazy free_swa moved KV"
    elif op == "speculate" and running:
        w.speculate(rng)
    elif op == "finish" and running:
        w.finish(rng.sample(running, rng.randint(1, min(3, len(running)))), rng)
        if w.lazy:
            assert w.moves() == moves_before, f"{what}: a lazy free moved KV"
    elif op == "flush":
        a.flush_opportunistic()
    elif op == "events":
        event = FakeEvent(done=rng.random() < 0.5, polls=rng.randint(0, 4))
        a.set_latest_forward_done_event(event)
        live = w.live()
        if live:
            a.set_inflight_forward(
                event, torch.tensor(rng.sample(live, min(len(live), 8)), device=w.device)
            )
        if rng.random() < 0.5:
            event.done = True
    w.check(what)


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("store_kind", ["unified", "engine"])
def test_tri_pool_serving_workload(device, seed, lazy, page_size, store_kind):
    rng = rng_for(seed * 1000 + page_size * 10 + lazy)
    total_bytes = 1 << 15 if page_size == 1 else 1 << 16
    w = TriWorld(device, page_size, lazy, store_kind, total_bytes, float_at=rng.uniform(0.2, 0.8))
    for i in range(150):
        step(w, rng, i)
    assert w.refused > 0, "the run never filled the buffer"
    # Every request finishes: nothing is live on any side, and a cleared tri-pool offers
    # what a fresh one does.
    w.finish(list(w.running), rng)
    w.check("after finishing every request")
    a = w.alloc
    for side in (a.full_attn_allocator, a.swa_attn_allocator, a.mamba_allocator):
        assert side.allocated_count() == 0
    a.clear()
    fresh = TriWorld(device, page_size, lazy, store_kind, total_bytes, w.pool.spec("swa").float_at)
    assert (a.available_size(), a.mamba_available_size()) == (
        fresh.alloc.available_size(),
        fresh.alloc.mamba_available_size(),
    )
    w.check("after clear")


def test_bad_layouts_are_refused_and_make_nothing(device):
    baseline = native.live_handles()
    specs = [
        mamba_spec("mamba", 2, "up"),
        mha_spec("swa", 3, "floating"),
        mha_spec("full", 2, "down"),
    ]
    cases = [
        (specs[::-1], "listed from the low end up"),
        ([specs[0], mha_spec("swa", 3, "floating", 1.5), specs[2]], "float_at 1.5"),
        ([specs[0], mha_spec("swa", 3, "floating", 0.0), specs[2]], "float_at 0"),
        ([specs[0], mha_spec("swa", 3, "down"), specs[2]], "grows down"),
    ]
    for bad, message in cases:
        with pytest.raises(errors.InvalidArgumentError) as err:
            UnifiedKVPool(total_bytes=1 << 15, sub_pool_specs=bad, device=device, page_size=4)
        assert message in str(err.value) and isinstance(err.value, AssertionError)
    with pytest.raises(errors.InvalidArgumentError, match="'up', 'down' or 'floating'"):
        mha_spec("swa", 3, "sideways")
    with pytest.raises(errors.InvalidArgumentError, match="'up', 'down' or 'floating'"):
        native.UnifiedKVPool(1 << 15, [("a", 64, 1, "up"), ("b", 64, 1, "sideways")], device)
    assert native.live_handles() == baseline


@pytest.mark.parametrize("float_at", [0.25, 0.75])
def test_the_floating_band_starts_at_float_at(device, float_at):
    w = TriWorld(device, 4, False, "unified", 1 << 15, float_at)
    swa = w.alloc.swa_attn_allocator
    assert swa.grow_direction == "floating"
    assert w.alloc.full_attn_allocator.grow_direction == "down"
    assert w.alloc.mamba_allocator.grow_direction == "up"
    state = swa._side.state()
    assert state.gap_below_bytes + state.gap_above_bytes == state.gap_bytes
    below = state.gap_below_bytes / (state.gap_below_bytes + state.gap_above_bytes)
    assert abs(below - float_at) < 0.1, f"the band starts at {below:.2f} of the free bytes"


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_backup_window_over_all_three_sides(device, lazy):
    w = TriWorld(device, 4, lazy, "unified")
    a = w.alloc
    rng = rng_for(3)
    w.admit(2, rng, "admit")
    w.check("admitted")
    sizes = (a.available_size(), a.mamba_available_size())
    snapshot = a.backup_state()
    assert a.alloc(8) is not None and a.mamba_allocator.alloc(1) is not None
    with pytest.raises(errors.InvalidStateError):
        a.free(torch.tensor(w.live()))  # frees wait for the window to close
    assert a.restore_state(snapshot) == []
    assert (a.available_size(), a.mamba_available_size()) == sizes
    w.check("restored")
    with pytest.raises(errors.InvalidStateError):
        a.restore_state(snapshot)  # spent
    pair = native.UnifiedSWAAllocator(
        native.UnifiedKVPool(1 << 14, [("f", 64, 4, "up"), ("s", 64, 4, "down")], device),
        native.allocator_options(),
        native.allocator_options(),
        "f",
        "s",
    )
    with pytest.raises(errors.InvalidArgumentError, match="backup_state"):
        a.restore_state(pair.backup_state())  # another composite's
    w.check("after refused restores")


def physical(w, r):
    """Where a request's KV (both sides) and state slot are now."""
    ids = torch.tensor(r.tokens, device=w.device)
    a = w.alloc
    return (
        a.translate_kv_loc(ids).tolist(),
        a.translate_loc_from_full_to_swa(ids).tolist(),
        a.mamba_allocator.translate_kv_loc(torch.tensor([r.slot], device=w.device)).tolist(),
    )


@pytest.mark.parametrize("gated", [False, True], ids=["ungated", "gated"])
def test_native_tri_pool_groups_gates_and_hooks(device, gated):
    """kvpool.native's tri-pool: a free group over KV and state slots, the move gate on
    both kinds (a flush packs around the gated request's pages until its transfer is
    done), the forward hooks over every side."""
    w = TriWorld(device, 1, True, "unified")
    tri = w.alloc._pair
    rng = rng_for(4)
    w.admit(3, rng, "admit")
    reqs = list(w.running.values())
    assert tri.sizes().state_slot_full_token_cost == -(
        -w.alloc.mamba_allocator.entry_bytes_per_page // w.alloc.full_attn_allocator.entry_bytes
    )
    with pytest.raises(errors.NotAllocatedError):
        tri.gate_transfer(FakeEvent(), [], [10**6])  # nothing gated
    transfer = FakeEvent()
    kept = reqs[-1]  # allocated last: the edge of its bands, what a flush moves first
    if gated:
        tri.gate_transfer(transfer, kept.tokens, [kept.slot])
    done = FakeEvent(done=True)
    tri.set_latest_forward_done(done)
    tri.set_inflight_forward(done, kept.tokens)
    before = physical(w, kept)
    tri.free_group_begin()
    for r in reqs[:-1]:
        tri.free(r.tokens)
        tri.state.free([r.slot])
    tri.free_group_end()
    for r in reqs[:-1]:
        w.forget(r.tokens)
        w.state.forget([r.slot])
    w.running = {0: kept}
    w.check("after the group")
    tri.drain_pending_reuse()
    moved = tri.flush_opportunistic()
    assert (physical(w, kept) == before) == gated, f"{moved} pages moved"
    w.check("after the flush")
    transfer.done = True
    tri.flush_opportunistic()
    tri.check_invariants()
    w.check("after the transfer")
