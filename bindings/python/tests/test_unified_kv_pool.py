"""UnifiedKVPool: geometry as the reference computes it, page-major views over the
one byte buffer (kvpool's, or an engine tensor adopted without a copy), and the
KV cache classes over them."""

from types import SimpleNamespace

import pytest
import torch

from kvpool.sglang import (
    MultiEndedAllocator,
    UnifiedKVPool,
    UnifiedMambaPool,
    UnifiedMHATokenToKVPool,
)
from support import HEAD_DIM, HEADS, mamba_spec, mha_spec


def test_geometry_and_views(device):
    specs = [mha_spec("full", 2, "up"), mha_spec("swa", 3, "down")]
    pool = UnifiedKVPool(total_bytes=1 << 14, sub_pool_specs=specs, device=device, page_size=4)
    full = specs[0]
    assert full.entry_bytes() == 2 * 2 * HEADS * HEAD_DIM * 2
    assert pool.max_slots("full") == (1 << 14) // full.entry_bytes()
    # The padding sink covers page 0 of every sub-pool (slot 0's rows spread over its page).
    sink = 4 * specs[1].entry_bytes()
    assert pool.min_slot_index("full") == -(-sink // full.entry_bytes())
    assert pool._raw.dtype == torch.uint8 and pool._raw.numel() == 1 << 14
    k, v = pool.mha_views_for("full")
    assert len(k) == 2 and k[0].shape == (pool.max_slots("full") // 4, 4, HEADS, HEAD_DIM)
    # Page p, slot s, layer l of K sits at bytes p * page_bytes + l * 4 * (k_row + v_row) + s * k_row.
    k[1].view(torch.int16)[3, 2, 0, 0] = 12345
    page_bytes = full.page_bytes(4)
    at = 3 * page_bytes + full.layer_k_offset_in_page(1, 4) + 2 * full.k_row_bytes()
    assert int(pool._raw[at : at + 2].view(torch.int16)) == 12345
    v[0].view(torch.int16)[1, 0, 1, 3] = -7
    at = page_bytes + full.layer_v_offset_in_page(0, 4) + (HEAD_DIM + 3) * 2
    assert int(pool._raw[at : at + 2].view(torch.int16)) == -7
    with pytest.raises(AssertionError):
        UnifiedKVPool(
            total_bytes=1 << 14,
            sub_pool_specs=[mha_spec("a", 1, "up"), mha_spec("b", 1, "up")],
            device=device,
        )


def test_mamba_views_follow_the_reference_layout(device):
    specs = [mha_spec("full", 2, "down"), mamba_spec("mamba", 2, "up")]
    pool = UnifiedKVPool(total_bytes=1 << 15, sub_pool_specs=specs, device=device)
    conv, temporal = pool.mamba_views_for("mamba")
    slots = pool.max_slots("mamba")
    assert conv[0].shape == (2, slots, 4, 3) and temporal.shape == (2, slots, 2, 4, 4)
    entry = specs[1].entry_bytes()
    temporal.view(torch.int32)[1, 5, 1, 2, 3] = 99
    # Per slot: conv rows of every layer, then temporal rows of every layer.
    at = 5 * entry + 2 * 4 * 3 * 2 + (1 * 32 + 1 * 16 + 2 * 4 + 3) * 4
    assert int(pool._raw[at : at + 4].view(torch.int32)) == 99
    state = UnifiedMambaPool(unified_buffer=pool, sub_pool_name="mamba")
    state.temporal[:, 7] = 1.5
    idx = torch.tensor([7], device=pool.device)
    state.copy_from(idx, torch.tensor([9], device=pool.device))
    assert (state.temporal[:, 9] == 1.5).all()
    state.clear_slots(idx)
    assert (state.temporal[:, 7] == 0).all()


def test_adopts_an_engine_buffer_without_a_copy(device):
    specs = [mha_spec("full", 2, "up"), mha_spec("swa", 3, "down")]
    engine = torch.zeros(1 << 14, dtype=torch.uint8, device=device)
    pool = UnifiedKVPool(total_bytes=1 << 14, sub_pool_specs=specs, device=device, buffer=engine)
    assert pool._raw.data_ptr() == engine.data_ptr()
    side = MultiEndedAllocator(
        kvcache=None, unified_buffer=pool, sub_pool_name="full", device=device, is_id_owner=True
    )
    ids = side.alloc(8)
    k, _ = pool.mha_views_for("full")
    phys = side.translate_kv_loc(ids)
    k[0].view(torch.int16)[phys, 0] = 5
    side.free(ids[:4])  # eager: the last four move down into the freed pages
    assert (k[0].view(torch.int16)[side.translate_kv_loc(ids[4:]), 0] == 5).all()
    assert int(engine.view(torch.int16).ne(0).sum()) > 0
    with pytest.raises(AssertionError):
        UnifiedKVPool(
            total_bytes=1 << 15, sub_pool_specs=specs, device=device, buffer=engine
        )  # too small


def test_mha_kv_pool_store_and_move(device):
    specs = [mha_spec("full", 2, "up"), mha_spec("swa", 3, "down")]
    pool = UnifiedKVPool(total_bytes=1 << 14, sub_pool_specs=specs, device=device, page_size=4)
    kv = UnifiedMHATokenToKVPool(unified_buffer=pool, sub_pool_name="full", page_size=4)
    loc = torch.tensor([9, 10, 13], device=pool.device)
    k = (
        torch.arange(3 * HEADS * HEAD_DIM, device=pool.device)
        .reshape(3, HEADS, HEAD_DIM)
        .to(torch.bfloat16)
    )
    kv.set_kv_buffer(SimpleNamespace(layer_id=1), loc, k, -k)
    assert torch.equal(kv.get_key_buffer(1)[loc // 4, loc % 4], k)
    assert torch.equal(kv.get_value_buffer(1)[loc // 4, loc % 4], -k)
    dst = torch.tensor([20, 21, 22], device=pool.device)
    kv.move_kv_cache(dst, loc)
    assert torch.equal(kv.get_key_buffer(1)[dst // 4, dst % 4], k)
