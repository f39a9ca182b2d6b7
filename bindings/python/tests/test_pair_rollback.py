"""Speculative rollback on the pairs through kvpool.sglang: backup_state, allocations on
both sides (KV tokens, and state slots on the Mamba pair), then restore_state, which
undoes them on both sides at once, or commit_state, which keeps them; frees inside the
window, a spent state and a state that is not the pair's are refused and change
nothing. KV and state data stamped at allocation are found after every step."""

import copy

import pytest
import torch

from kvpool.errors import InvalidArgumentError, InvalidStateError
from support import rng_for
from test_mamba_pair import MambaWorld, new_req
from test_swa_pair import SwaWorld


def tables(sides):
    return [
        (s.allocated_count(), s.virtual_to_physical.clone(), s.physical_to_virtual.clone())
        for s in sides
    ]


def assert_tables(before, sides, what):
    for (count, v2p, p2v), (count_now, v2p_now, p2v_now) in zip(before, tables(sides)):
        assert count == count_now, f"{what}: allocated_count {count_now}, expected {count}"
        assert torch.equal(v2p, v2p_now) and torch.equal(p2v, p2v_now), f"{what}: tables differ"


def assert_refused(error, call, sides, what):
    before = tables(sides)
    with pytest.raises(error):
        call()
    assert_tables(before, sides, what)


def decode(w, token_lists):
    """One decode step of requests given by their token lists (each grows by its new
    token); returns the new tokens, one per request, or [] when there was no room."""
    seq = torch.tensor([len(tokens) + 1 for tokens in token_lists])
    last = torch.tensor([tokens[-1] for tokens in token_lists], device=w.device)
    out = w.alloc.alloc_decode(seq.to(w.device), seq, last)
    if out is None:
        return []
    for tokens, t in zip(token_lists, out.tolist()):
        tokens.append(t)
    return out.tolist()


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("page_size", [1, 4])
def test_swa_pair_rollback(device, seed, lazy, page_size):
    rng = rng_for(seed * 31 + page_size + 5 * lazy)
    w = SwaWorld(device, page_size, lazy, "unified")
    a = w.alloc
    sides = [a.full_attn_allocator, a.swa_attn_allocator]
    for round_no in range(8):
        what = f"round {round_no}"
        for _ in range(rng.randint(1, 3)):
            out = a.alloc(rng.randint(1, 3) * page_size)
            if out is not None:
                w.stamp(out.tolist(), rng)
                w.add_request(out.tolist())
        w.check(what)
        before, books = tables(sides), copy.deepcopy((w.requests, w.swa_freed, w.next_id))
        state = a.backup_state()
        drafted = []
        for _ in range(rng.randint(1, 4)):
            if w.requests and rng.random() < 0.6:
                chosen = rng.sample(list(w.requests), rng.randint(1, len(w.requests)))
                new = decode(w, [w.requests[r] for r in chosen])
            else:
                out = a.alloc(rng.randint(1, 2) * page_size)
                new = out.tolist() if out is not None else []
                if new:
                    w.add_request(new)
            if new:
                w.stamp(new, rng)
            drafted += new
        w.check(f"{what}, inside the window")
        if w.live():
            live = torch.tensor(w.live()[:1], device=w.device)
            assert_refused(InvalidStateError, lambda: a.free(live), sides, f"{what}: free")
        if rng.random() < 0.6:
            a.restore_state(state)
            w.requests, w.swa_freed, w.next_id = books
            w.full.forget(drafted)
            w.swa.forget(drafted)
            assert_tables(before, sides, f"{what}: after restore_state")
        else:
            a.commit_state(state)
        w.check(f"{what}, after the window")
        for call in (lambda: a.restore_state(state), lambda: a.commit_state(state)):
            assert_refused(InvalidStateError, call, sides, f"{what}: a spent state")
        # A finished request frees both sides again once the window is closed.
        if w.requests:
            rid = rng.choice(list(w.requests))
            a.free(torch.tensor(w.requests[rid], device=w.device))
            w.full.forget(w.requests[rid])
            w.swa.forget(w.requests[rid])
            del w.requests[rid]
        w.check(f"{what}, after a free")


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("page_size", [1, 4])
def test_mamba_pair_rollback(device, seed, lazy, page_size):
    rng = rng_for(seed * 37 + page_size + 3 * lazy)
    w = MambaWorld(device, page_size, lazy, "unified", total_bytes=1 << 15)
    a = w.alloc
    sides = [a.full_attn_allocator, a.mamba_allocator]
    for round_no in range(8):
        what = f"round {round_no}"
        req = new_req(round_no)
        if w.reqs.alloc([req]) is not None:
            w.prefill(req, rng.randint(1, 2 * page_size), rng)
        w.check(what)
        before = tables(sides)
        lengths = [len(r.tokens) for r in w.running]
        state = a.backup_state()
        drafted, slots = [], []
        for _ in range(rng.randint(1, 3)):
            new = decode(w, [r.tokens for r in w.running]) if w.running else []
            for r, t in zip(w.running, new):
                w.reqs.write((r.req_pool_idx, len(r.tokens) - 1), torch.tensor(t))
            drafted += new
            got = a.mamba_allocator.alloc(rng.randint(1, 2))
            if got is not None:
                slots += got.tolist()
                w.state.stamp(got.tolist(), rng)
        if drafted:
            w.full.stamp(drafted, rng)
        # A request table cannot take state slots inside the window: a restore
        # would take them back from under it.
        assert_refused(
            InvalidStateError, lambda: w.reqs.alloc([new_req(-1)]), sides, f"{what}: admit"
        )
        if slots:
            freed = torch.tensor(slots[:1], device=w.device)
            assert_refused(
                InvalidStateError, lambda: a.mamba_allocator.free(freed), sides, f"{what}: free"
            )
        if rng.random() < 0.6:
            a.restore_state(state)
            for r, n in zip(w.running, lengths):
                del r.tokens[n:]
            w.full.forget(drafted)
            w.state.forget(slots)
            assert_tables(before, sides, f"{what}: after restore_state")
        else:
            a.commit_state(state)
            if slots:
                a.mamba_allocator.free(torch.tensor(slots, device=w.device))
                w.state.forget(slots)
        w.check(f"{what}, after the window")
        assert_refused(
            InvalidStateError, lambda: a.restore_state(state), sides, f"{what}: a spent state"
        )


def test_pair_state_must_be_the_pairs_own(device):
    w = SwaWorld(device, 1, True, "unified")
    a = w.alloc
    sides = [a.full_attn_allocator, a.swa_attn_allocator]
    state = a.backup_state()
    out = a.alloc(4)
    # The reference's shape (one state per side) would bypass the pair's atomic check.
    side_states = [s.backup_state() for s in sides]
    assert_refused(InvalidArgumentError, lambda: a.restore_state(side_states), sides, "a list")
    other = SwaWorld(device, 1, True, "unified").alloc
    assert_refused(
        InvalidStateError, lambda: a.restore_state(other.backup_state()), sides, "another pair's"
    )
    a.restore_state(state)
    assert not any(sides[0].is_slot_allocated(int(t)) for t in out.tolist())
    a.full_attn_allocator.check_invariants()
    a.swa_attn_allocator.check_invariants()
