"""PD transfer descriptors through Python (kvpool.transfer, re-exported by kvpool.native):
two pools in one process, a request written through the SGLang-compatible pools' views on
the sender, both ends described and gated by one marker, the paired runs copied between the
two buffers (whole pages, or layer by layer) while both ends free and compact, then the
receiver's K/V read back through its own views at its translate. A cancelled transfer leaves
the receiver as it was; bad ids are refused. The registration accessors
(get_contiguous_buf_infos, get_state_buf_infos, transfer_layout) agree with the views."""

import random

import pytest
import torch

from kvpool import native
from kvpool.errors import InvalidArgumentError
from kvpool.sglang import UnifiedSWAKVPool, UnifiedSWATokenToKVPoolAllocator
from support import HEAD_DIM, HEADS, swa_pool


class Done:
    """The transfer's marker: done once the engine says so."""

    def __init__(self):
        self.done = False

    def query(self):
        return self.done


class End:
    """An engine's SWA pair with its KV cache (full: 2 layers, swa: 3 layers)."""

    def __init__(self, device, page_size):
        pool = swa_pool(device, page_size)
        self.kv = UnifiedSWAKVPool(
            unified_buffer=pool,
            swa_attention_layer_ids=[1, 2, 3],
            full_attention_layer_ids=[0, 4],
            page_size=page_size,
        )
        self.alloc = UnifiedSWATokenToKVPoolAllocator(
            unified_buffer=pool,
            kvcache=self.kv,
            device=device,
            full_max_total_num_tokens=10000,
            swa_max_total_num_tokens=10000,
            page_size=page_size,
            lazy_compaction=True,
        )
        self.full = self.kv.full_kv_pool
        self.side = self.alloc.full_attn_allocator._side

    def raw(self):
        return self.kv.unified_buffer._raw

    def write(self, tokens, seed):
        """K and V of every full layer for tokens (virtual), random; returns them."""
        g = torch.Generator().manual_seed(seed)
        loc = self.alloc.full_attn_allocator.translate_kv_loc(tokens)
        data = []
        for layer in range(2):
            k = torch.randn(len(tokens), HEADS, HEAD_DIM, generator=g).to(torch.bfloat16)
            v = torch.randn(len(tokens), HEADS, HEAD_DIM, generator=g).to(torch.bfloat16)
            self.full.set_kv_buffer(None, loc, k, v, layer_id_override=layer)
            data.append((k, v))
        return data

    def read(self, tokens):
        loc = self.alloc.full_attn_allocator.translate_kv_loc(tokens).cpu().to(torch.int64)
        ps = self.full._view_page_size
        page, slot = loc // ps, loc % ps
        return [
            (self.full.k_buffer[l][page, slot].cpu(), self.full.v_buffer[l][page, slot].cpu())
            for l in range(2)
        ]


def physical(end, tokens):
    return end.alloc.full_attn_allocator.translate_kv_loc(tokens.to(end.kv.device)).cpu()


@pytest.mark.parametrize("whole_pages", [True, False], ids=["pages", "layers"])
def test_a_request_crosses_to_another_pool_while_both_compact(device, seed, whole_pages):
    rng = random.Random(seed)
    ps = rng.choice([1, 2, 4])
    a, b = End(device, ps), End(device, ps)
    before = [a.alloc.alloc(ps * rng.randint(1, 3)) for _ in range(3)]
    request = a.alloc.alloc(ps * rng.randint(2, 5))
    above = a.alloc.alloc(ps)
    data = a.write(request, seed)
    theirs = b.alloc.alloc(ps * 2)
    n = rng.randint(1, len(request))  # the transfer may end inside a page
    sent = request[:n].cpu()

    done = Done()
    layout = a.full.transfer_layout()
    src = native.describe_transfer(a.side, layout, sent, done)
    dst_all = b.alloc.alloc(len(request))
    dst = dst_all[:n].cpu()
    dst_d = native.describe_transfer(b.side, b.full.transfer_layout(), dst, done)
    if whole_pages:
        runs = native.pair_pages(src, dst_d)
        across = native.pair_runs(src.page_runs(), dst_d.page_runs())
    else:
        runs = torch.cat(
            [native.pair_layer(src, dst_d, l, blk) for l in range(2) for blk in range(2)]
        )
        across = torch.cat(
            [
                native.pair_runs(src.layer_runs(l, blk), dst_d.layer_runs(l, blk))
                for l in range(2)
                for blk in range(2)
            ]
        )
    # Ends in two processes pair the run lists they exchanged: the same copies.
    assert torch.equal(across, runs)
    half = len(runs) // 2
    native.copy_runs(a.raw(), b.raw(), runs[:half])
    where = physical(a, sent)
    for r in before:
        a.alloc.free(r.cpu())
    a.alloc.full_attn_allocator._flush(urgent=True)
    b.alloc.free(theirs.cpu())
    b.alloc.full_attn_allocator._flush(urgent=True)
    assert torch.equal(physical(a, sent), where)
    native.copy_runs(a.raw(), b.raw(), runs[half:])
    done.done = True

    got = b.read(dst)
    for layer in range(2):
        assert torch.equal(got[layer][0], data[layer][0][:n])
        assert torch.equal(got[layer][1], data[layer][1][:n])
    info = src.info()
    assert info.tokens == n and info.page_bytes == a.full.get_contiguous_buf_infos()[2][0]
    # Published: the receiver's request moves like any other now, its bytes with it.
    b.alloc.full_attn_allocator._flush(urgent=True)
    got = b.read(dst)
    assert torch.equal(got[1][1], data[1][1][:n])
    for r in (request, above):
        a.alloc.free(r.cpu())
    b.alloc.free(dst_all.cpu())
    a.alloc.check_invariants()
    b.alloc.check_invariants()


def test_a_cancelled_transfer_leaves_the_receiver_as_it_was(device):
    a, b = End(device, 4), End(device, 4)
    request = a.alloc.alloc(8)
    a.write(request, 1)
    b.alloc.full_attn_allocator._flush(urgent=True)
    available = b.alloc.available_size()
    done = Done()
    native.describe_transfer(a.side, a.full.transfer_layout(), request.cpu(), done)
    dst = b.alloc.alloc(8)
    native.describe_transfer(b.side, b.full.transfer_layout(), dst.cpu(), done)
    done.done = True  # the engine gave up and stopped writing
    b.alloc.free(dst.cpu())
    b.alloc.full_attn_allocator._flush(urgent=True)
    assert b.alloc.available_size() == available
    a.alloc.free(request.cpu())
    a.alloc.check_invariants()
    b.alloc.check_invariants()


def test_bad_ids_are_refused_and_gate_nothing(device):
    a = End(device, 4)
    request = a.alloc.alloc(4)
    layout = a.full.transfer_layout()
    with pytest.raises(InvalidArgumentError, match="token 4000 .position 1. is not bound"):
        native.describe_transfer(a.side, layout, [int(request[0]), 4000], Done())
    with pytest.raises(InvalidArgumentError, match="does not follow its predecessor"):
        native.describe_transfer(a.side, layout, [int(request[1]), int(request[0])], Done())
    # Nothing was gated: the pages move once freed around.
    a.alloc.free(request.cpu())
    a.alloc.check_invariants()


def test_run_lists_pair_byte_by_byte_and_bad_lists_are_refused():
    runs = native.pair_runs([[0, 8], [100, 4]], [[40, 4], [200, 8]])
    assert runs.tolist() == [[0, 40, 4], [4, 200, 4], [100, 204, 4]]
    assert native.pair_runs([], torch.empty(0, 2, dtype=torch.int64)).shape == (0, 3)
    with pytest.raises(InvalidArgumentError, match="runs hold 8 bytes, the receiver's 4"):
        native.pair_runs([[0, 8]], [[0, 4]])
    with pytest.raises(InvalidArgumentError, match="dst run 1 .offset 9, length -1."):
        native.pair_runs([[0, 8]], [[0, 8], [9, -1]])
    with pytest.raises(InvalidArgumentError, match="src_runs must be .n, 2."):
        native.pair_runs([0, 8], [[0, 8]])


def test_copy_runs_puts_every_run_where_a_copy_per_run_does(device, seed):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, 256, (rng.randint(3000, 9000),), dtype=torch.uint8, generator=g)
    dst = torch.randint(0, 256, (rng.randint(3000, 9000),), dtype=torch.uint8, generator=g)
    runs, at = [], 0
    while True:  # destinations that do not overlap, sources anywhere
        n = rng.randint(1, 700)
        if at + n > len(dst):
            break
        if rng.random() < 0.7:
            runs.append([rng.randint(0, len(src) - n), at, n])
        at += n + rng.randint(0, 5)
    want = dst.clone()
    for s, d, n in runs:
        want[d : d + n] = src[s : s + n]
    src_d, dst_d = src.to(device), dst.to(device)
    native.copy_runs(src_d, dst_d, torch.tensor(runs, dtype=torch.int64))
    assert torch.equal(dst_d.cpu(), want)


def test_copy_runs_refuses_bad_runs_and_copies_nothing(device):
    src = torch.arange(256, dtype=torch.uint8, device=device)
    dst = torch.zeros(128, dtype=torch.uint8, device=device)
    with pytest.raises(InvalidArgumentError, match="run 1 .src_offset 0, dst_offset 100, length 29."):
        native.copy_runs(src, dst, [[0, 0, 8], [0, 100, 29]])
    with pytest.raises(InvalidArgumentError, match="must be .n, 3."):
        native.copy_runs(src, dst, [[0, 0]])
    with pytest.raises(InvalidArgumentError, match="dst_bytes must be a 1-D uint8 tensor"):
        native.copy_runs(src, dst.view(torch.int8), [[0, 0, 8]])
    assert int(dst.count_nonzero()) == 0
    native.copy_runs(src, dst, torch.empty(0, 3, dtype=torch.int64))
    assert int(dst.count_nonzero()) == 0


def test_registration_accessors_agree_with_the_views(device):
    end = End(device, 4)
    raw = end.raw()
    ptrs, lens, items = end.kv.get_contiguous_buf_infos()
    s_ptrs, s_lens, s_items = end.kv.get_state_buf_infos()
    assert ptrs == s_ptrs == [raw.data_ptr()] and lens == s_lens == [raw.numel()]
    layout = end.full.transfer_layout()
    k0, v1 = end.full.k_buffer[0], end.full.v_buffer[1]
    assert items[0] == k0.stride(0) * k0.element_size()
    part = items[0] // layout.layers
    assert k0.data_ptr() - raw.data_ptr() == layout.block_offsets[0]
    assert v1.data_ptr() - raw.data_ptr() == part + layout.block_offsets[1]
    assert layout.row_bytes == [k0.stride(1) * k0.element_size(), v1.stride(1) * 2]
    swa = end.kv.swa_kv_pool
    assert s_items[0] == swa.k_buffer[0].stride(0) * 2 and s_items[0] != items[0]
