"""Tensor-parallel ranks (issue #29): three processes (multiprocessing's "spawn") each
build an SGLang-compatible allocator as SGLang's engine does, for an SWA hybrid model and
a Mamba hybrid model (tp_ranks_worker.py), and run the call sequence the seed gives:
prefills, decodes, frees and free groups, free_swa or state slots, flushes, forward events
completed by hand, backup windows restored or committed. Each sends its state_digest()
after every step; the parent asserts that all ranks agree at every step, and, in a second
run, that a rank given one call more at step k disagrees at step k. The processes are
made once and serve every seed and device."""

import multiprocessing
import random

import pytest

import tp_ranks_worker

RANKS = 3
STEPS = 80


@pytest.fixture(scope="module")
def ranks():
    """RANKS worker processes, each with the parent's end of its pipe."""
    context = multiprocessing.get_context("spawn")
    conns, processes = [], []
    for _ in range(RANKS):
        parent, child = context.Pipe()
        process = context.Process(target=tp_ranks_worker.serve, args=(child,), daemon=True)
        process.start()
        child.close()
        conns.append(parent)
        processes.append(process)
    yield conns
    for conn, process in zip(conns, processes):
        conn.send(None)
        process.join(timeout=30)
        assert process.exitcode == 0


def _messages(conn):
    """One run's messages from one rank, through its last ("end" or "error")."""
    messages = [conn.recv()]
    while messages[-1][0] not in ("end", "error"):
        messages.append(conn.recv())
    return messages


def run_ranks(ranks, model, device, seed, deviant=None, deviate_at=None):
    """Runs the seed's sequence on every rank (rank deviant makes one call more at step
    deviate_at, or at the first step after it with room); returns each step's digests,
    {rank: digest}, and the step where the deviant deviated. Every rank's messages are
    read to their end first, so that a failing rank leaves none behind for the next run."""
    for r, conn in enumerate(ranks):
        conn.send(("run", model, device, seed, STEPS, deviate_at if r == deviant else None))
    runs = [_messages(conn) for conn in ranks]
    for r, messages in enumerate(runs):
        if messages[-1][0] == "error":
            pytest.fail(f"rank {r} failed:\n{messages[-1][1]}")
    digests, deviated_at = [{} for _ in range(STEPS)], None
    for r, messages in enumerate(runs):
        *steps, (_, stats) = messages
        assert [m[1] for m in steps] == list(range(len(steps)))
        for _, i, digest, deviated in steps:
            digests[i][r] = digest
            if deviated:
                deviated_at = i
        if r != deviant:
            assert len(steps) == STEPS and stats["ok"] > 0
    return digests, deviated_at


@pytest.mark.parametrize("model", tp_ranks_worker.MODELS)
def test_ranks_driven_alike_agree_at_every_step(ranks, device, model, seed):
    digests, _ = run_ranks(ranks, model, device, seed)
    for i, step in enumerate(digests):
        assert len(set(step.values())) == 1, f"{model} seed {seed}: ranks differ at step {i}"
    # The state moved: the digests are not one value throughout.
    assert len({step[0] for step in digests}) > STEPS // 4


@pytest.mark.parametrize("model", tp_ranks_worker.MODELS)
def test_a_rank_given_another_call_is_detected_at_that_step(ranks, device, model, seed):
    k = random.Random(f"deviate:{model}:{seed}").randrange(STEPS // 2)
    digests, deviated_at = run_ranks(ranks, model, device, seed, deviant=RANKS - 1, deviate_at=k)
    assert deviated_at is not None and deviated_at >= k, "the deviant found no room to deviate"
    for i, step in enumerate(digests):
        others = {step[r] for r in range(RANKS - 1)}
        assert len(others) == 1, f"{model} seed {seed}: the ranks driven alike differ at step {i}"
        if i < deviated_at:
            assert step[RANKS - 1] in others, f"the deviant differs at step {i} < {deviated_at}"
        elif i == deviated_at:
            assert step[RANKS - 1] not in others, f"the deviation at step {i} went unseen"


def test_every_handle_has_a_digest_and_a_queued_free_counts(device):
    """In one process: the digests of kvpool.native's handles and of every kvpool.sglang
    allocator, and a free queued in a free group, which changes the allocator's digest
    before it reaches kvpool's tables."""
    from kvpool.sglang import (
        UnifiedMambaSlotAllocator,
        UnifiedMambaSWATokenToKVPoolAllocator,
        UnifiedMambaTokenToKVPoolAllocator,
    )
    from support import mamba_pool, swa_allocator, tri_pool

    a, b = swa_allocator(device, 2), swa_allocator(device, 2)
    assert a.state_digest() == b.state_digest()
    ids_a, ids_b = a.alloc(8).cpu(), b.alloc(8).cpu()
    assert ids_a.tolist() == ids_b.tolist()
    allocated = a.state_digest()
    assert b.state_digest() == allocated
    for x, y in zip(a._pair.sides, b._pair.sides):
        assert x.state_digest() == y.state_digest() and 0 <= x.state_digest() < 1 << 64
    a.free_group_begin()
    a.free(ids_a[:4])
    assert a._pair.state_digest() == b._pair.state_digest()
    assert a.state_digest() != allocated
    b.free_group_begin()
    b.free(ids_b[:4])
    assert a.state_digest() == b.state_digest()
    a.free_group_end()
    b.free_group_end()
    assert a.state_digest() == b.state_digest() != allocated

    m = UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=mamba_pool(device, 2), kvcache=None, device=device, page_size=2
    )
    slots = UnifiedMambaSlotAllocator(m.mamba_allocator, max_size=8, device=device)
    before = m.state_digest()
    assert slots.alloc(1) is not None
    assert slots.state_digest() == m.mamba_allocator.state_digest()
    assert m.state_digest() != before

    t = UnifiedMambaSWATokenToKVPoolAllocator(
        unified_buffer=tri_pool(device, 2), kvcache=None, device=device, page_size=2
    )
    before = (t.state_digest(), t._pair.state_digest())
    assert t.alloc(4) is not None
    assert t.state_digest() != before[0] and t._pair.state_digest() != before[1]
    for allocator in (a, m, t):
        allocator.check_invariants()
