"""The SWA pair through kvpool.sglang.UnifiedSWATokenToKVPoolAllocator, driven as an
engine drives it: prefill (alloc_extend), decode, plain alloc, frees of finished
requests, free_swa of tokens that left the window, opportunistic flushes and
forward events, with KV data stamped at allocation and looked up through the
translate calls after every step."""

import pytest
import torch

from kvpool.sglang import UnifiedSWATokenToKVPoolAllocator
from support import FakeEvent, Stamped, check_all, rng_for, swa_pool, swa_stores


class SwaWorld:
    """swa_page_size: the SWA side's own page size (None: page_size), the grain of free_swa."""

    def __init__(
        self, device, page_size, lazy, store_kind, total_bytes=1 << 17, swa_page_size=None
    ):
        self.ps = page_size
        self.swa_ps = swa_page_size or page_size
        self.pool = swa_pool(device, page_size, total_bytes)
        full_pages = self.pool.max_slots("full") // page_size
        swa_pages = self.pool.max_slots("swa") // self.swa_ps
        kv, full_store, swa_store = swa_stores(
            store_kind, self.pool, full_pages, swa_pages, page_size, device, swa_page_size
        )
        self.kv = kv
        self.alloc = UnifiedSWATokenToKVPoolAllocator(
            unified_buffer=self.pool,
            kvcache=kv,
            device=device,
            full_max_total_num_tokens=full_pages * page_size,
            swa_max_total_num_tokens=swa_pages * self.swa_ps,
            page_size=page_size,
            lazy_compaction=lazy,
            swa_page_size=swa_page_size,
        )
        self.device = self.alloc.device
        self.full = Stamped(self.alloc.full_attn_allocator, full_store)
        self.swa = Stamped(self.alloc.swa_attn_allocator, swa_store)
        self.engine_stores = [s for s in (full_store, swa_store) if hasattr(s, "calls")]
        self.requests = {}  # id -> virtual tokens
        self.swa_freed = {}  # id -> leading tokens whose SWA pages are released
        self.next_id = 0

    def moves(self):
        return sum(len(s.calls) for s in self.engine_stores)

    def live(self):
        return [t for toks in self.requests.values() for t in toks]

    def swa_live(self):
        """Tokens bound on the SWA side: past the released window, to the end of the last full
        page (a full page binds all its SWA pages, with smaller SWA pages too)."""
        live = []
        for r, toks in self.requests.items():
            live += toks[self.swa_freed[r] :]
            if toks:
                live += range(toks[-1] + 1, (toks[-1] // self.ps + 1) * self.ps)
        return live

    def check(self, what):
        check_all(self.alloc.full_attn_allocator, self.live(), self.full, what)
        check_all(self.alloc.swa_attn_allocator, self.swa_live(), self.swa, what)
        for r, toks in self.requests.items():
            for p, t in enumerate(toks):
                assert (
                    t % self.ps == p % self.ps and t // self.ps == toks[p - p % self.ps] // self.ps
                ), f"{what}: request {r} breaks the page structure at position {p}"
        assert len(set(self.live())) == len(self.live()), f"{what}: a virtual id is live twice"

    def stamp(self, tokens, rng):
        self.full.stamp(tokens, rng)
        self.swa.stamp(tokens, rng)

    def add_request(self, tokens):
        self.requests[self.next_id] = tokens
        self.swa_freed[self.next_id] = 0
        self.next_id += 1

    def last_loc(self, rids):
        return torch.tensor(
            [self.requests[r][-1] if self.requests.get(r) else -1 for r in rids],
            dtype=torch.int64,
            device=self.device,
        )


def snapshot(alloc):
    return (
        alloc.full_attn_allocator.allocated_count(),
        alloc.swa_attn_allocator.allocated_count(),
        alloc.available_size(),
        alloc.full_attn_allocator.virtual_to_physical.clone(),
        alloc.swa_attn_allocator.virtual_to_physical.clone(),
    )


def assert_unchanged(before, alloc, what):
    """A refused allocation allocates nothing. In lazy mode it may still have
    compacted (the reference flushes both sides before giving up); in eager mode
    nothing at all changed."""
    after = snapshot(alloc)
    assert before[:2] == after[:2], f"{what}: a refused allocation changed the live counts"
    if not alloc.lazy_compaction:
        assert before[2] == after[2], f"{what}: available_size changed on a refused allocation"
        assert torch.equal(before[3], after[3]) and torch.equal(
            before[4], after[4]
        ), f"{what}: tables changed"


def step(w, rng, lazy, step_no):
    a = w.alloc
    op = rng.choices(
        ["extend_new", "extend", "decode", "alloc", "free", "free_swa", "flush", "events"],
        [3, 2, 4, 1, 2, 2, 2 if lazy else 0, 1 if lazy else 0],
    )[0]
    what = f"step {step_no} ({op})"
    moves_before = w.moves()
    if op in ("extend_new", "extend", "decode", "alloc"):
        if op == "alloc":
            rids, prefix = [None], [0]
            seq = [rng.randint(1, 4) * w.ps]
        else:
            existing = list(w.requests)
            if op != "extend_new" and not existing:
                return
            if op == "extend_new":
                rids = [None] * rng.randint(1, 3)
            else:
                rids = rng.sample(existing, min(len(existing), rng.randint(1, 4)))
            prefix = [len(w.requests[r]) if r is not None else 0 for r in rids]
            grow = [1 if op == "decode" else rng.randint(1, 3 * w.ps) for _ in rids]
            seq = [p + g for p, g in zip(prefix, grow)]
        need = sum(s - p for s, p in zip(seq, prefix))
        pages = sum(-(-s // w.ps) - -(-p // w.ps) for s, p in zip(seq, prefix))
        room = a.available_size()
        before = snapshot(a)
        prefix_t, seq_t = torch.tensor(prefix), torch.tensor(seq)
        if op == "alloc":
            out = a.alloc(need)
        elif op == "decode":
            out = a.alloc_decode(seq_t.to(w.device), seq_t, w.last_loc(rids))
        else:
            out = a.alloc_extend(
                prefix_t.to(w.device), prefix_t, seq_t.to(w.device), seq_t, w.last_loc(rids), need
            )
        if out is None:
            assert (
                pages * w.ps > room
            ), f"{what}: {pages} pages refused with {room} tokens available"
            assert_unchanged(before, a, what)
            return
        assert out.dtype == torch.int64 and out.numel() == need
        ids = out.tolist()
        at = 0
        for r, p, s in zip(rids, prefix, seq):
            new = ids[at : at + s - p]
            at += s - p
            if r is None:
                w.add_request(new)
            else:
                w.requests[r] = w.requests[r] + new
        w.stamp(ids, rng)
        if not lazy:
            assert w.moves() == moves_before, f"{what}: eager allocation moved KV"
    elif op == "free":
        if not w.requests:
            return
        r = rng.choice(list(w.requests))
        toks = w.requests.pop(r)
        w.swa_freed.pop(r)
        device_ids = rng.random() < 0.5
        a.free(torch.tensor(toks, device=w.device) if device_ids else torch.tensor(toks))
        w.full.forget(toks)
        w.swa.forget(toks)
        if lazy:
            assert w.moves() == moves_before, f"{what}: a lazy free moved KV"
    elif op == "free_swa":
        candidates = [r for r, t in w.requests.items() if len(t) - w.swa_freed[r] > w.swa_ps]
        if not candidates:
            return
        r = rng.choice(candidates)
        start = w.swa_freed[r]
        k = rng.randint(1, (len(w.requests[r]) - start) // w.swa_ps) * w.swa_ps
        gone = w.requests[r][start : start + k]
        a.free_swa(torch.tensor(gone, device=w.device))
        w.swa_freed[r] = start + k
        w.swa.forget(gone)
        assert (
            a.translate_loc_from_full_to_swa(torch.tensor(gone, device=w.device)) == 0
        ).all(), f"{what}: released SWA tokens do not translate to the sink"
        if lazy:
            assert w.moves() == moves_before, f"{what}: a lazy free_swa moved KV"
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
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("store_kind", ["unified", "engine"])
def test_swa_pair_serving_workload(device, seed, lazy, page_size, store_kind):
    rng = rng_for(seed * 1000 + page_size * 10 + lazy)
    w = SwaWorld(device, page_size, lazy, store_kind)
    for i in range(150):
        step(w, rng, lazy, i)
    # Everything freed: the pair is back at its initial capacity.
    for r in list(w.requests):
        w.alloc.free(torch.tensor(w.requests.pop(r)))
    w.requests.clear()
    w.full.stamps.clear()
    w.swa.stamps.clear()
    if lazy:
        w.alloc.full_attn_allocator._flush(urgent=True)
        w.alloc.swa_attn_allocator._flush(urgent=True)
    fresh = SwaWorld(device, page_size, lazy, store_kind)
    assert w.alloc.available_size() == fresh.alloc.available_size()
    assert (
        w.alloc.full_attn_allocator.allocated_count()
        == 0
        == w.alloc.swa_attn_allocator.allocated_count()
    )
    w.check("after freeing everything")


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_joint_budget_both_or_neither(device, lazy):
    w = SwaWorld(device, 4, lazy, "unified", total_bytes=1 << 15)
    a = w.alloc
    n = a.available_size()
    assert n > 0 and n % 4 == 0
    # Each token costs a full and a SWA slot of the gap: the joint view is below each side's own.
    assert n < a.full_attn_allocator.available_size() and n < a.swa_attn_allocator.available_size()
    before = snapshot(a)
    assert a.alloc(n + 4) is None
    assert_unchanged(before, a, "alloc beyond the joint budget")
    ids = a.alloc(n)
    assert ids is not None and ids.numel() == n
    assert a.available_size() == 0
    w.add_request(ids.tolist())
    w.stamp(ids.tolist(), rng_for(1))
    w.check("joint budget used up")
    assert (a.translate_loc_from_full_to_swa(ids) > 0).all()


def test_free_swa_keeps_full_side(device):
    w = SwaWorld(device, 4, False, "engine")
    a = w.alloc
    ids = a.alloc(16)
    w.add_request(ids.tolist())
    w.stamp(ids.tolist(), rng_for(2))
    swa_before = a.swa_attn_allocator.allocated_count()
    a.free_swa(ids[:8])
    w.swa_freed[0] = 8
    w.swa.forget(ids[:8].tolist())
    assert a.swa_attn_allocator.allocated_count() == swa_before - 8
    assert a.full_attn_allocator.allocated_count() == 16
    assert (a.translate_loc_from_full_to_swa(ids[:8]) == 0).all()
    assert (a.translate_kv_loc(ids[:8]) > 0).all()
    w.check("after free_swa")
    a.free(ids)  # the released SWA pages are skipped
    w.requests.clear()
    w.full.stamps.clear()
    w.swa.stamps.clear()
    w.check("after free")
    assert a.full_attn_allocator.allocated_count() == 0 == a.swa_attn_allocator.allocated_count()


def test_paged_extend_reuses_the_tail_page(device):
    w = SwaWorld(device, 4, False, "unified")
    a = w.alloc
    prefix, seq = torch.tensor([0, 0]), torch.tensor([6, 3])
    out = a.alloc_extend(
        prefix.to(w.device), prefix, seq.to(w.device), seq, w.last_loc([None, None]), 9
    )
    r0, r1 = out[:6].tolist(), out[6:].tolist()
    assert r0[4] // 4 != r0[0] // 4 and r0[:4] == list(range(r0[0], r0[0] + 4))
    # Request 0 continues in its half-full page; request 1 fills its page, then decodes into a new one.
    prefix, seq = torch.tensor([6, 3]), torch.tensor([8, 5])
    last = torch.tensor([r0[-1], r1[-1]], device=w.device)
    out = a.alloc_extend(prefix.to(w.device), prefix, seq.to(w.device), seq, last, 4).tolist()
    assert out[:2] == [r0[-1] + 1, r0[-1] + 2]
    assert out[2] == r1[-1] + 1 and out[3] // 4 != r1[0] // 4 and out[3] % 4 == 0
    pages_before = a.full_attn_allocator.allocated_count()
    seq = torch.tensor([9, 6])
    last = torch.tensor([out[1], out[3]], device=w.device)
    dec = a.alloc_decode(seq.to(w.device), seq, last).tolist()
    assert dec[0] % 4 == 0 and dec[1] == out[3] + 1
    assert (
        a.full_attn_allocator.allocated_count() == pages_before + 4
    )  # one new page, for request 0


def test_kvcache_attached_and_live_views(device):
    w = SwaWorld(device, 1, False, "engine")
    a = w.alloc
    assert type(w.kv).attached == (a.full_attn_allocator, a.swa_attn_allocator)
    v2p = a.full_attn_allocator.virtual_to_physical
    ptr = v2p.data_ptr()
    assert v2p.dtype == torch.int64 and v2p.shape == (a.full_attn_allocator.num_pages + 1,)
    ids = a.alloc(5)
    assert a.full_attn_allocator.virtual_to_physical.data_ptr() == ptr
    assert (
        v2p[ids] >= a.full_attn_allocator.min_page_index
    ).all()  # the same tensor sees the allocation
    assert (a.swa_attn_allocator.virtual_to_physical[ids] > 0).all()


def test_free_group_frees_once_at_its_end(device):
    w = SwaWorld(device, 1, False, "engine")
    a = w.alloc
    ids = a.alloc(12)
    a.free_group_begin()
    a.free(ids[:4])
    a.free(ids[4:8].cpu())
    assert a.full_attn_allocator.allocated_count() == 12  # nothing freed inside the group
    a.free_group_end()
    assert a.full_attn_allocator.allocated_count() == 4
    w.add_request(ids[8:].tolist())
    w.check("after the group")
