"""The native objects over the KV-allocator handle (c_api_kv.h): a side, the SWA pair, the Mamba
pair and the tri-pool answer the ops they share through one C entry point each; an op an
allocator has no part for is refused with InvalidArgumentError, naming the allocator, and
changes nothing; a snapshot of another kind of allocator is refused."""

import pytest

from kvpool import native
from kvpool.errors import InvalidArgumentError

PAGE = 4


class Done:
    def query(self):
        return True


def _buffer(sides):
    return native.UnifiedKVPool(1 << 15, sides, "cpu")


def side():
    buffer = _buffer([("full", 64, PAGE, "up")])
    return native.MultiEndedAllocator.create(buffer, "full", native.allocator_options())


def swa_pair():
    buffer = _buffer([("full", 64, PAGE, "up"), ("swa", 32, PAGE, "down")])
    return native.UnifiedSWAAllocator(buffer, native.allocator_options(), native.allocator_options())


def mamba_pair():
    buffer = _buffer([("full", 64, PAGE, "up"), ("mamba", 128, 1, "down")])
    return native.UnifiedMambaAllocator(buffer, native.allocator_options(), native.allocator_options())


def tri_pool():
    buffer = _buffer(
        [("mamba", 128, 1, "up"), ("swa", 32, PAGE, "floating"), ("full", 64, PAGE, "down")]
    )
    options = native.allocator_options(lazy=True)
    return native.UnifiedMambaSWAAllocator(buffer, options, options, options)


MAKERS = [side, swa_pair, mamba_pair, tri_pool]


@pytest.mark.parametrize("make", MAKERS)
def test_every_allocator_answers_the_shared_ops(make):
    a = make()
    ids = a.alloc(2 * PAGE)
    assert ids is not None and ids.numel() == 2 * PAGE
    empty = make().state_digest()
    held = a.state_digest()
    assert held != empty
    snapshot = a.backup_state()
    undone = a.alloc(PAGE)
    assert undone is not None and a.state_digest() != held
    a.restore_state(snapshot)
    assert a.alloc(PAGE).tolist() == undone.tolist()  # its ids free again, first in line
    a.gate_transfer(Done(), ids)
    a.free_group_begin()
    a.free(ids)
    a.free_group_end()
    a.drain_pending_reuse()
    a.check_invariants()
    a.clear()
    a.check_invariants()
    assert a.alloc(2 * PAGE) is not None


@pytest.mark.parametrize(
    "make, call, named",
    [
        (side, lambda a, ids: a.gate_transfer(Done(), ids, [1]), "a side has no state slots"),
        (swa_pair, lambda a, ids: a.alloc_state_slots(1), "the SWA pair has no state slots"),
        (mamba_pair, lambda a, ids: a.free_swa(ids), "the Mamba pair has no sliding-window"),
    ],
)
def test_an_op_without_a_part_is_refused_and_changes_nothing(make, call, named):
    a = make()
    ids = a.alloc(PAGE)
    before = a.state_digest()
    with pytest.raises(InvalidArgumentError, match=named):
        call(a, ids)
    assert a.state_digest() == before


def test_the_composites_share_the_tri_pools_calls():
    """The pairs have the calls only the tri-pool had: one flush pass, the forward's hooks."""
    for make in (swa_pair, mamba_pair):
        pair = make()
        ids = pair.alloc(PAGE)
        pair.set_latest_forward_done(Done())
        pair.set_inflight_forward(Done(), ids)
        assert pair.flush_opportunistic() == 0
        pair.free(ids)
        pair.check_invariants()


@pytest.mark.parametrize("make, other", [(side, swa_pair), (swa_pair, tri_pool), (tri_pool, side)])
def test_a_snapshot_of_another_kind_is_refused(make, other):
    a, b = make(), other()
    snapshot = b.backup_state()
    with pytest.raises(InvalidArgumentError, match="what its backup_state"):
        a.restore_state(snapshot)
    b.commit_state(snapshot)
