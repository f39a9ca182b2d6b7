"""The move gate through kvpool.native: gate_transfer(marker, ids) on a side, the SWA
pair and the Mamba pair. Until the marker says the transfer is done, a lazy flush leaves
the gated pages where they are, and an eager free that would move or overwrite them is
refused (InvalidStateError, nothing changed) unless the marker is a device event, which
the compaction then waits for on the stream. KV bytes stamped with their virtual id are
found through translate after every step."""

import pytest
import torch

from kvpool import native
from kvpool.errors import InvalidArgumentError, InvalidStateError, NotAllocatedError
from support import FakeEvent

ENTRY = 16  # bytes per token slot on every side


def buffer(device, page_size, state_entry=None):
    second = (
        ("swa", ENTRY, page_size, True) if state_entry is None else ("mamba", state_entry, 1, True)
    )
    return native.UnifiedKVPool(1 << 14, [("full", ENTRY, page_size, False), second], device)


def sides(device, page_size, lazy):
    buf = buffer(device, page_size)
    up = native.MultiEndedAllocator.create(buf, "full", native.allocator_options(lazy=lazy))
    down = native.MultiEndedAllocator.create(buf, "swa", native.allocator_options(lazy=lazy))
    up.bind_peer(down)
    return buf, up, down


def physical(side, ids):
    ids = torch.as_tensor(ids, dtype=torch.int64, device=side.device)
    return side.translate(ids, torch.empty_like(ids)).cpu()


class Stamps:
    """Each live token's slot holds bytes derived from (tag, virtual id)."""

    def __init__(self, side, tag, entry=ENTRY):
        self.side, self.tag, self.entry, self.live = side, tag, entry, []

    def pattern(self, ids):
        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1, 1)
        k = torch.arange(self.entry, dtype=torch.int64).reshape(1, -1)
        return ((ids * 131 + k * 7 + self.tag * 29) % 251).to(torch.uint8)

    def rows(self, ids):
        slots = physical(self.side, ids).reshape(-1, 1) * self.entry
        return slots + torch.arange(self.entry).reshape(1, -1)

    def add(self, ids):
        ids = [int(t) for t in ids]
        data = self.side.buffer.bytes
        data[self.rows(ids).to(data.device)] = self.pattern(ids).to(data.device)
        self.live += ids

    def drop(self, ids):
        gone = {int(t) for t in ids}
        self.live = [t for t in self.live if t not in gone]

    def check(self):
        self.side.check_invariants()
        if self.live:
            data = self.side.buffer.bytes
            got = data[self.rows(self.live).to(data.device)].cpu()
            assert torch.equal(got, self.pattern(self.live)), "KV bytes lost by a compaction"


def take(side, stamps, n):
    ids = side.alloc(n)
    assert ids is not None
    stamps.add(ids.cpu().tolist())
    return ids.cpu().tolist()


@pytest.mark.parametrize("page_size", [1, 4])
def test_lazy_flush_leaves_gated_pages_until_done(device, page_size):
    buf, up, _down = sides(device, page_size, lazy=True)
    st = Stamps(up, 0)
    ids = take(up, st, 6 * page_size)
    sent = ids[5 * page_size :]  # the frontier page: the first a flush would move
    marker = FakeEvent()
    up.gate_transfer(marker, sent)
    where = physical(up, sent)
    gone = ids[: 2 * page_size]
    up.free(gone)
    st.drop(gone)
    assert up.flush(False) == 0 and up.flush(True) == 0
    assert torch.equal(physical(up, sent), where)
    st.check()
    marker.done = True
    assert up.flush(True) > 0
    st.check()


@pytest.mark.parametrize("page_size", [1, 4])
def test_eager_free_touching_gated_pages_is_refused_until_done(device, page_size):
    buf, up, _down = sides(device, page_size, lazy=False)
    st = Stamps(up, 0)
    ids = take(up, st, 6 * page_size)
    sent = ids[5 * page_size :]
    marker = FakeEvent()
    up.gate_transfer(marker, sent)
    gone = ids[page_size : 2 * page_size]  # its compaction moves the gated frontier page
    before = up.state_string()
    with pytest.raises(InvalidStateError):
        up.free(gone)
    assert up.state_string() == before
    st.check()
    marker.done = True
    up.free(gone)
    st.drop(gone)
    st.check()


def test_gate_misuse_is_refused(device):
    buf, up, _down = sides(device, 4, lazy=True)
    st = Stamps(up, 0)
    ids = take(up, st, 8)
    before = up.state_string()
    with pytest.raises(InvalidArgumentError):
        up.gate_transfer(None, ids)
    with pytest.raises(NotAllocatedError):
        up.gate_transfer(FakeEvent(), [ids[0], 4000])
    snapshot = up.backup_state()
    with pytest.raises(InvalidStateError):
        up.gate_transfer(FakeEvent(), ids)
    up.commit_state(snapshot)
    assert up.state_string() == before
    st.check()


@pytest.mark.parametrize("lazy", [False, True])
def test_swa_pair_gates_both_sides(device, lazy):
    buf = buffer(device, 2)
    opts = native.allocator_options(lazy=lazy)
    pair = native.UnifiedSWAAllocator(buf, opts, opts)
    ids = pair.alloc(8 * 2).cpu().tolist()
    full, swa = Stamps(pair.full, 0), Stamps(pair.swa, 1)
    full.add(ids)
    swa.add(ids)
    # Page 1 is the SWA side's frontier page once page 0 left the window.
    pair.free_swa(ids[:2])
    swa.drop(ids[:2])
    marker = FakeEvent()
    with pytest.raises(NotAllocatedError):
        pair.gate_transfer(marker, [ids[0], 4000])
    pair.gate_transfer(marker, ids[:4])
    gone = ids[6:8]  # page 3: the SWA side's compaction would move gated page 1
    if lazy:
        pair.free(gone)
        where = physical(pair.swa, ids[2:4])
        pair.swa.flush(True)
        assert torch.equal(physical(pair.swa, ids[2:4]), where)
    else:
        before = (pair.full.state_string(), pair.swa.state_string())
        with pytest.raises(InvalidStateError):
            pair.free(gone)
        assert (pair.full.state_string(), pair.swa.state_string()) == before
        marker.done = True
        pair.free(gone)
    full.drop(gone)
    swa.drop(gone)
    full.check()
    swa.check()


@pytest.mark.parametrize("lazy", [False, True])
def test_mamba_pair_gates_tokens_and_state_slots(device, lazy):
    buf = buffer(device, 2, state_entry=64)
    opts = native.allocator_options(lazy=lazy)
    pair = native.UnifiedMambaAllocator(buf, opts, opts)
    full, state = Stamps(pair.full, 0), Stamps(pair.state, 1, entry=64)
    tokens = take(pair.full, full, 4 * 2)
    slots = take(pair.state, state, 4)
    marker = FakeEvent()
    before = (pair.full.state_string(), pair.state.state_string())
    with pytest.raises(NotAllocatedError):
        pair.gate_transfer(marker, tokens[:2], [slots[0], 4000])
    assert (pair.full.state_string(), pair.state.state_string()) == before
    # Slot 0 is the state side's frontier slot: a free of slot 2 would move it.
    pair.gate_transfer(marker, tokens[:2], [slots[0]])
    if lazy:
        pair.state.free([slots[2]])
        where = physical(pair.state, [slots[0]])
        pair.state.flush(True)
        assert torch.equal(physical(pair.state, [slots[0]]), where)
    else:
        with pytest.raises(InvalidStateError):
            pair.state.free([slots[2]])
        assert (pair.full.state_string(), pair.state.state_string()) == before
        marker.done = True
        pair.state.free([slots[2]])
    state.drop([slots[2]])
    marker.done = True
    take(pair.state, state, 1)
    full.check()
    state.check()


def test_eager_free_waits_for_a_device_event(device):
    if device != "cuda":
        pytest.skip("a stream waits for a device event only in a CUDA pool")
    buf, up, _down = sides(device, 4, lazy=False)
    st = Stamps(up, 0)
    ids = take(up, st, 6 * 4)
    sent = ids[5 * 4 :]
    slots = (physical(up, sent).reshape(-1, 1) * ENTRY + torch.arange(ENTRY)).to(buf.bytes.device)
    copy_stream = torch.cuda.Stream(device=buf.bytes.device)
    copy_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(copy_stream):
        torch.cuda._sleep(50_000_000)  # the transfer is still running when the free comes
        copied = buf.bytes[slots]
        done = torch.cuda.Event()
        done.record(copy_stream)
    up.gate_transfer(done, sent)
    gone = ids[4:8]
    up.free(gone)  # moves the gated page after the event, without blocking the host
    st.drop(gone)
    torch.cuda.synchronize()
    assert torch.equal(copied.cpu(), st.pattern(sent))
    st.check()
