"""Handout zeroing through kvpool.sglang (full_zero_on_alloc / swa_zero_on_alloc /
mamba_zero_on_alloc; zero_on_alloc on a MultiEndedAllocator): every page a side hands
out reaches the engine zeroed, fresh or reused after frees and compaction, while the
bytes of every live token stay where translate finds them. Token t of a side holds
bytes [p * entry_bytes, (p + 1) * entry_bytes) of the unified buffer, p its physical
token id (a page's tokens lie inside its page envelope)."""

import pytest
import torch

import kvpool
from kvpool.sglang import (
    MultiEndedAllocator,
    UnifiedMambaTokenToKVPoolAllocator,
    UnifiedSWATokenToKVPoolAllocator,
)
from support import EngineKV, mamba_pool, rng_for, swa_pool

STALE = 0xA5


def physical_tokens(side, tokens):
    ps = side.page_size
    v2p = side.virtual_to_physical.cpu()
    return [int(v2p[t // ps]) * ps + t % ps for t in tokens]


def token_bytes(raw, side, tokens):
    e = side.entry_bytes
    return [raw[p * e : (p + 1) * e] for p in physical_tokens(side, tokens)]


def stamp_of(side_tag, token):
    return (token * 7 + side_tag * 101) % 251 + 1


class Sides:
    """The sides of one composite, each with its stamps, over the buffer's bytes."""

    def __init__(self, pool, sides):
        self.pool = pool
        self.sides = sides  # (tag, allocator, zeroes)
        self.live = []
        self.stale_handouts = {tag: 0 for tag, _, _ in sides}

    def handed_out(self, tokens):
        raw = self.pool._raw.cpu()
        for tag, side, zeroes in self.sides:
            ps = side.page_size
            rows = token_bytes(raw, side, tokens)
            stale = sum(int(bool(r.any())) for r in rows)
            self.stale_handouts[tag] += stale
            if zeroes:
                assert stale == 0, f"side {tag}: {stale} handed-out tokens are not zero"
                # A token that starts a page took a new page: all of it is zero.
                for t, p in zip(tokens, physical_tokens(side, tokens)):
                    if t % ps == 0:
                        page = raw[p * side.entry_bytes : (p + ps) * side.entry_bytes]
                        assert not page.any(), f"side {tag}: new page of token {t} is not zero"
        self.check()
        for tag, side, _ in self.sides:
            e = side.entry_bytes
            for t, p in zip(tokens, physical_tokens(side, tokens)):
                self.pool._raw[p * e : (p + 1) * e] = stamp_of(tag, t)
        self.live.extend(tokens)

    def freed(self, tokens):
        gone = set(tokens)
        self.live = [t for t in self.live if t not in gone]
        self.check()

    def check(self):
        raw = self.pool._raw.cpu()
        for tag, side, _ in self.sides:
            side.check_invariants()
            for t, row in zip(self.live, token_bytes(raw, side, self.live)):
                assert bool((row == stamp_of(tag, t)).all()), f"side {tag}: token {t} lost its bytes"


def swa_composite(device, page_size, lazy, zero_full, zero_swa):
    pool = swa_pool(device, page_size, 1 << 14)
    pool._raw.fill_(STALE)
    alloc = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=None,
        device=device,
        full_max_total_num_tokens=10000,
        swa_max_total_num_tokens=10000,
        page_size=page_size,
        lazy_compaction=lazy,
        full_zero_on_alloc=zero_full,
        swa_zero_on_alloc=zero_swa,
    )
    sides = Sides(
        pool,
        [(0, alloc.full_attn_allocator, zero_full), (1, alloc.swa_attn_allocator, zero_swa)],
    )
    return alloc, sides


def churn(alloc, sides, rng, steps, device):
    """Requests grow by alloc_extend (across their partly filled last pages), alloc_decode
    and alloc, and finish; returns how many allocations reused freed room."""
    ps = alloc.page_size
    requests = []
    frees = 0
    for _ in range(steps):
        op = rng.randrange(6)
        got = None
        if op < 2:
            grow = [r for r in requests if rng.random() < 0.4]
            prefix = [len(r) for r in grow] + [0] * rng.randint(1, 2)
            seq = [p + rng.randint(1, 2 * ps) for p in prefix]
            last = [r[-1] for r in grow] + [-1] * (len(prefix) - len(grow))
            got = alloc.alloc_extend(
                torch.tensor(prefix, device=device),
                torch.tensor(prefix),
                torch.tensor(seq, device=device),
                torch.tensor(seq),
                torch.tensor(last, device=device),
                sum(seq) - sum(prefix),
            )
            if got is not None:
                ids, o = got.cpu().tolist(), 0
                for i, (p, s) in enumerate(zip(prefix, seq)):
                    part = ids[o : o + s - p]
                    o += s - p
                    if i < len(grow):
                        grow[i].extend(part)
                    else:
                        requests.append(part)
                sides.handed_out(ids)
        elif op < 4 and requests:
            seq = [len(r) + 1 for r in requests]
            got = alloc.alloc_decode(
                torch.tensor(seq, device=device),
                torch.tensor(seq),
                torch.tensor([r[-1] for r in requests], device=device),
            )
            if got is not None:
                ids = got.cpu().tolist()
                for r, t in zip(requests, ids):
                    r.append(t)
                sides.handed_out(ids)
        elif op == 4:
            got = alloc.alloc(rng.randint(1, 3) * ps)
            if got is not None:
                requests.append(got.cpu().tolist())
                sides.handed_out(requests[-1])
        if (got is None or op == 5) and requests:
            r = requests.pop(rng.randrange(len(requests)))
            alloc.free(torch.tensor(r))
            sides.freed(r)
            frees += 1
        if rng.random() < 0.2:
            alloc.full_attn_allocator.flush_opportunistic()
            alloc.swa_attn_allocator.flush_opportunistic()
            sides.check()
    return frees


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_swa_pair_hands_out_zeroed_pages(device, seed, lazy):
    alloc, sides = swa_composite(device, 4, lazy, True, True)
    assert alloc.full_attn_allocator.zero_on_alloc and alloc.swa_attn_allocator.zero_on_alloc
    frees = churn(alloc, sides, rng_for(seed), 120, device)
    assert frees > 10  # freed room was handed out again


def test_zeroing_is_per_side_and_off_by_default(device):
    alloc, sides = swa_composite(device, 2, True, False, True)
    assert not alloc.full_attn_allocator.zero_on_alloc
    churn(alloc, sides, rng_for(7), 80, device)
    # The full side handed out the stale bytes the buffer held; the SWA side, none.
    assert sides.stale_handouts[0] > 0
    assert sides.stale_handouts[1] == 0
    default = UnifiedSWATokenToKVPoolAllocator(
        unified_buffer=swa_pool(device, 2, 1 << 14),
        kvcache=None,
        device=device,
        full_max_total_num_tokens=100,
        swa_max_total_num_tokens=100,
        page_size=2,
    )
    assert not default.full_attn_allocator.zero_on_alloc
    assert not default.swa_attn_allocator.zero_on_alloc


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_mamba_state_slots_are_zeroed_when_handed_out(device, lazy):
    pool = mamba_pool(device, 2, 1 << 14)
    pool._raw.fill_(STALE)
    alloc = UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=pool,
        kvcache=None,
        device=device,
        page_size=2,
        lazy_compaction=lazy,
        mamba_zero_on_alloc=True,
    )
    state = alloc.mamba_allocator
    assert state.zero_on_alloc and not alloc.full_attn_allocator.zero_on_alloc
    sides = Sides(pool, [(2, state, True)])
    rng = rng_for(11)
    handed = 0
    for _ in range(60):
        slots = state.alloc(rng.randint(1, 3))
        if slots is not None:
            sides.handed_out(slots.cpu().tolist())
            handed += len(slots)
        if slots is None or rng.random() < 0.4:
            gone = rng.sample(sides.live, min(len(sides.live), rng.randint(1, 3)))
            state.free(torch.tensor(gone))
            sides.freed(gone)
    assert handed > state.num_pages  # slots were reused


def test_non_owner_alloc_with_virtual_zeroes(device):
    pool = swa_pool(device, 2, 1 << 14)
    pool._raw.fill_(STALE)
    full = MultiEndedAllocator(
        kvcache=None,
        unified_buffer=pool,
        sub_pool_name="full",
        device=device,
        is_id_owner=True,
        page_size=2,
    )
    swa = MultiEndedAllocator(
        kvcache=None,
        unified_buffer=pool,
        sub_pool_name="swa",
        device=device,
        is_id_owner=False,
        page_size=2,
        zero_on_alloc=True,
    )
    full.bind_peer(swa)
    sides = Sides(pool, [(1, swa, True)])
    for _ in range(3):
        ids = full.alloc(6)
        swa.alloc_with_virtual(torch.unique(ids // 2))
        sides.handed_out(ids.cpu().tolist())
        freed = ids[2:].cpu()
        swa.free(freed)
        full.free(freed)
        sides.freed(freed.tolist())


def test_zeroing_refuses_an_engine_kvcache(device):
    """The zeroing reaches the unified buffer only: a kvcache moved through
    move_kv_cache keeps its KV elsewhere, so the combination is refused."""
    pool = swa_pool(device, 1, 1 << 14)
    with pytest.raises(kvpool.KVPoolError, match="zero_on_alloc"):
        MultiEndedAllocator(
            kvcache=EngineKV(4096, device),
            unified_buffer=pool,
            sub_pool_name="full",
            device=device,
            is_id_owner=True,
            zero_on_alloc=True,
        )
