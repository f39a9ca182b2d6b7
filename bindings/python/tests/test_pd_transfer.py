"""The disaggregation (PD) transfer surface, driven as SGLang's PD scheduler drives it on an
MLA + Mamba (Kimi-Linear) stack: ``set_disagg_move_gate(gate)`` with a predicate over the
scheduler's transfer queues, ``translate_kv_indices_for_transfer`` for the physical token ids
the transfer engine addresses, and whole-page / whole-slot envelopes from
``get_contiguous_buf_infos``. Pages (and state slots) handed out for a transfer stay where
they were, bytes intact, until the gate next reports no transfer in flight; the rest of the
pool keeps compacting; after that they move like any other."""

import random
from types import SimpleNamespace

import pytest
import torch

from kvpool.sglang import UnifiedHybridReqToTokenPool
from test_mla_pool import DIM, DTYPE, LAYERS, kimi_stack, layer

PS = 4
REQUEST = 2 * PS  # tokens of one request: two pages


class Scheduler:
    """The part of SGLang's PD scheduler the move gate reads: transfers published and not yet
    concluded. gate() is True only when there are none."""

    def __init__(self):
        self.in_flight = set()

    def gate(self):
        return not self.in_flight


def stack(device, lazy=True):
    pool, kv, state, alloc = kimi_stack(device, PS, lazy, full_tokens=96, state_slots=8)
    sched = Scheduler()
    alloc.set_disagg_move_gate(sched.gate)
    return pool, kv, state, alloc, sched


def request(alloc, kv, state, tag):
    """Allocates one request (KV and a state slot) and writes it through the views."""
    tokens = alloc.alloc(REQUEST)
    slot = alloc.mamba_allocator.alloc(1)
    assert tokens is not None and slot is not None
    rows = alloc.translate_kv_loc_dense(tokens)
    data = torch.randn(LAYERS, REQUEST, 1, DIM).to(DTYPE)
    for l in range(LAYERS):
        kv.set_kv_buffer(layer(l), rows, data[l].to(kv.device), None)
    state.temporal[:, alloc.mamba_allocator.translate_kv_loc(slot)] = float(tag)
    return tokens, slot, data


def pages_of(physical_tokens):
    return sorted({int(t) // PS for t in physical_tokens.cpu()})


def envelope(pool, kv, page):
    """The bytes a transfer engine copies for one page: its item of get_contiguous_buf_infos."""
    ptrs, lens, items = kv.get_contiguous_buf_infos()
    assert ptrs == [pool._raw.data_ptr()] and lens == [pool._raw.numel()]
    return pool._raw[page * items[0] : (page + 1) * items[0]].clone()


def readback(alloc, kv, tokens):
    rows = alloc.translate_kv_loc_dense(tokens)
    return torch.stack([kv.get_key_buffer(l)[rows].cpu() for l in range(LAYERS)])


def test_without_a_gate_it_is_the_physical_translate(device):
    _, kv, state, alloc = kimi_stack(device, PS, lazy=True)
    tokens, _, _ = request(alloc, kv, state, 1)
    out = alloc.translate_kv_indices_for_transfer(tokens.to(torch.int32))
    assert out.dtype == torch.int64
    assert torch.equal(out, alloc.translate_kv_loc(tokens))


def test_gate_needs_lazy_compaction_and_a_callable(device):
    _, _, _, eager = kimi_stack(device, PS, lazy=False)
    with pytest.raises(AssertionError, match="lazy compaction"):
        eager.set_disagg_move_gate(lambda: True)
    _, _, _, lazy = kimi_stack(device, PS, lazy=True)
    with pytest.raises(AssertionError, match="callable"):
        lazy.set_disagg_move_gate(True)
    assert lazy.full_attn_allocator.disagg_move_gate is None


def test_pages_under_transfer_survive_compaction_until_the_gate_opens(device, seed):
    torch.manual_seed(seed)
    pool, kv, state, alloc, sched = stack(device)
    full, slots = alloc.full_attn_allocator, alloc.mamba_allocator
    # The full band grows down: d is highest, e the frontier; slots grow up likewise.
    d = request(alloc, kv, state, 1)
    a = request(alloc, kv, state, 2)
    b = request(alloc, kv, state, 3)
    e = request(alloc, kv, state, 4)
    # b goes out: the scheduler takes its physical ids, then records the transfer.
    published = alloc.translate_kv_indices_for_transfer(b[0])
    sched.in_flight.add("b")
    b_pages = pages_of(published)
    b_bytes = [envelope(pool, kv, p) for p in b_pages]
    b_slot = int(slots.translate_kv_loc(b[1]))
    # Holes above b: without the gate a flush would move e and then b into them.
    for req in (d, a):
        alloc.free(req[0].cpu())
        slots.free(req[1].cpu())
    e_before = pages_of(full.translate_kv_loc(e[0]))
    for side in (full, slots):
        side._flush(urgent=True)
    # The rest compacted (e moved up), b stayed where the peer addresses it, bytes intact.
    assert pages_of(full.translate_kv_loc(e[0])) != e_before
    assert torch.equal(full.translate_kv_loc(b[0]), published)
    assert all(torch.equal(envelope(pool, kv, p), x) for p, x in zip(b_pages, b_bytes))
    assert int(slots.translate_kv_loc(b[1])) == b_slot
    for req in (b, e):
        assert torch.equal(readback(alloc, kv, req[0]), req[2])
    # The transfer concludes: the gate opens and b is an ordinary page again.
    sched.in_flight.clear()
    for side in (full, slots):
        side._flush(urgent=True)
    assert not torch.equal(full.translate_kv_loc(b[0]), published)
    for req, tag in ((b, 3), (e, 4)):
        assert torch.equal(readback(alloc, kv, req[0]), req[2])
        assert bool((state.temporal[:, slots.translate_kv_loc(req[1])] == float(tag)).all())
    alloc.check_invariants()


def test_freed_pages_under_transfer_are_not_reused(device):
    """A request aborted mid-transfer: its pages are freed, but the engine may still be reading
    them, so no allocation gets them until the gate opens."""
    pool, kv, state, alloc, sched = stack(device)
    full = alloc.full_attn_allocator
    a = request(alloc, kv, state, 1)
    published = alloc.translate_kv_indices_for_transfer(a[0])
    sched.in_flight.add("a")
    a_pages = pages_of(published)
    a_bytes = torch.cat([envelope(pool, kv, p) for p in a_pages])
    alloc.free(a[0].cpu())
    taken = []
    while True:
        tokens = alloc.alloc(PS)
        if tokens is None:
            break
        taken += pages_of(full.translate_kv_loc(tokens))
        rows = alloc.translate_kv_loc_dense(tokens)
        for l in range(LAYERS):
            value = torch.full((PS, 1, DIM), 9.0, dtype=DTYPE, device=rows.device)
            kv.set_kv_buffer(layer(l), rows, value, None)
    assert taken and not set(taken) & set(a_pages)
    assert torch.equal(torch.cat([envelope(pool, kv, p) for p in a_pages]), a_bytes)
    # Once the transfer has concluded, the pages are free again.
    sched.in_flight.clear()
    again = alloc.alloc(PS)
    assert again is not None and set(pages_of(full.translate_kv_loc(again))) <= set(a_pages)


def test_gate_open_at_publication_still_protects(device):
    """SGLang's decode side publishes an address (the translation) before it counts the
    destination as published: the gate still reads open at translation time. The pages must
    stay protected until the gate opens *after* that."""
    pool, kv, state, alloc, sched = stack(device)
    full = alloc.full_attn_allocator
    a = request(alloc, kv, state, 1)
    b = request(alloc, kv, state, 2)
    published = alloc.translate_kv_indices_for_transfer(b[0])  # gate open here
    sched.in_flight.add("b")  # ...recorded just after
    alloc.free(a[0].cpu())
    full._flush(urgent=True)
    assert torch.equal(full.translate_kv_loc(b[0]), published)
    sched.in_flight.clear()
    full._flush(urgent=True)
    assert not torch.equal(full.translate_kv_loc(b[0]), published)
    assert torch.equal(readback(alloc, kv, b[0]), b[2])


def test_envelopes_carry_a_request_between_two_pools(device, seed):
    """Prefill and decode build the same stack; the transfer engine copies whole page envelopes
    (MLA) and slot envelopes (state) from prefill's physical ids to decode's. Decode's pool
    compacts while the copy is pending; the request then reads back intact through decode's
    own dense ids."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    p_pool, p_kv, p_state, p_alloc, p_sched = stack(device)
    d_pool, d_kv, d_state, d_alloc, d_sched = stack(device)
    for _ in range(rng.randint(0, 3)):
        request(p_alloc, p_kv, p_state, 0)  # prefill's pool holds others too
    src = request(p_alloc, p_kv, p_state, 5)
    filler = request(d_alloc, d_kv, d_state, 6)
    dst_tokens = d_alloc.alloc(REQUEST)
    dst_slot = d_alloc.mamba_allocator.alloc(1)
    # Both ends publish: decode its destinations, prefill its sources.
    dst = d_alloc.translate_kv_indices_for_transfer(dst_tokens)
    d_sched.in_flight.add("r")
    dst_state = int(d_alloc.mamba_allocator.translate_kv_loc(dst_slot))
    srcp = p_alloc.translate_kv_indices_for_transfer(src[0])
    p_sched.in_flight.add("r")
    src_state = int(p_alloc.mamba_allocator.translate_kv_loc(src[1]))
    # Decode frees the filler below/above and compacts while the transfer is pending.
    d_alloc.free(filler[0].cpu())
    d_alloc.mamba_allocator.free(filler[1].cpu())
    for side in (d_alloc.full_attn_allocator, d_alloc.mamba_allocator):
        side._flush(urgent=True)
    # The transfer engine: one copy per page and per slot, at ptr + index * item.
    _, _, (page_item,) = p_kv.get_contiguous_buf_infos()
    _, _, (slot_item,) = p_state.get_contiguous_buf_infos()
    assert d_kv.get_contiguous_buf_infos()[2] == [page_item]
    assert d_state.get_contiguous_buf_infos()[2] == [slot_item]
    for s, d in zip(pages_of(srcp), pages_of(dst)):
        d_pool._raw[d * page_item : (d + 1) * page_item] = p_pool._raw[
            s * page_item : (s + 1) * page_item
        ]
    d_pool._raw[dst_state * slot_item : (dst_state + 1) * slot_item] = p_pool._raw[
        src_state * slot_item : (src_state + 1) * slot_item
    ]
    d_sched.in_flight.clear()
    p_sched.in_flight.clear()
    assert torch.equal(readback(d_alloc, d_kv, dst_tokens), src[2])
    d_slot = d_alloc.mamba_allocator.translate_kv_loc(dst_slot)
    assert bool((d_state.temporal[:, d_slot] == 5.0).all())
    d_alloc.check_invariants()
    p_alloc.check_invariants()


def test_state_metadata_is_whole_envelope(device):
    pool, kv, state, alloc = kimi_stack(device, PS, lazy=True)
    hybrid = alloc.get_kvcache()
    assert hybrid.get_kv_layer_ids() == []
    assert hybrid.get_contiguous_buf_infos() == kv.get_contiguous_buf_infos()
    ptrs, lens, items = hybrid.get_state_buf_infos()
    assert ptrs == [pool._raw.data_ptr()] and items == [pool.mamba_spec("mamba").entry_bytes()]
    assert hybrid.get_state_dim_per_tensor() == [] and hybrid.get_state_layer_ids() == []
    assert state.get_state_slice_outer_counts() == [] and state.get_state_conv_shard_groups() == []


def test_decode_request_rows_cover_preallocated_requests(device):
    """SGLang's decode node builds its request table with pre_alloc_size: rows for the
    requests it preallocates beside the running ones, size staying the running cap."""
    _, _, _, alloc = kimi_stack(device, PS, lazy=True)
    reqs = UnifiedHybridReqToTokenPool(
        size=2,
        max_context_len=8,
        device=device,
        mamba_allocator=alloc.mamba_allocator,
        pre_alloc_size=2,
    )
    assert reqs.size == 2 and reqs.pre_alloc_size == 2
    batch = [
        SimpleNamespace(
            rid=i,
            req_pool_idx=None,
            mamba_pool_idx=None,
            mamba_ping_pong_track_buffer=None,
            mamba_next_track_idx=None,
        )
        for i in range(5)
    ]
    assert reqs.alloc(batch[:4]) is not None
    assert reqs.alloc(batch[4:]) is None
    with pytest.raises(AssertionError, match="pre_alloc_size"):
        UnifiedHybridReqToTokenPool(size=2, max_context_len=8, device=device, pre_alloc_size=-1)
