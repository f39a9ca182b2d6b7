"""Views from the C API's view descriptors (kvpool.layout), the layout's one derivation: for
several geometries the views the kvpool.sglang pools build (and an MHA pool's transfer layout)
address the bytes the formulas Python used before did (written out here as the oracle), a value
stamped through a view lands at the oracle's byte, kvpool.native's padded Mamba state views
alias exactly the bytes the library writes, and bad geometry is refused with a clear error."""

import random

import pytest
import torch

from kvpool import layout, native
from kvpool.errors import InvalidArgumentError
from kvpool.sglang import (
    MambaSubPoolSpec,
    MHASubPoolSpec,
    MLASubPoolSpec,
    UnifiedKVPool,
    UnifiedMHATokenToKVPool,
    build_dense_mla_views,
    build_page_major_mamba_views,
)


def _size(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _check_view(raw, view, shape, strides, offset_bytes, rng):
    """view has the oracle's shape and strides, starts at its byte, and a value stamped at a
    random element lands at the oracle's byte."""
    assert tuple(view.shape) == tuple(shape)
    assert view.stride() == tuple(strides)
    assert view.data_ptr() - raw.data_ptr() == offset_bytes
    index = tuple(rng.randrange(n) for n in shape)
    value = float(rng.randrange(1, 100))
    view[index] = value
    size = view.element_size()
    at = offset_bytes + sum(i * s for i, s in zip(index, strides)) * size
    assert float(raw[at : at + size].view(view.dtype)[0]) == value, index


MHA_CASES = [
    # layers, heads, head_dim, v_head_dim, dtype, page_size, view page size
    (2, 2, 4, None, torch.bfloat16, 4, 4),
    (3, 1, 8, 6, torch.float32, 1, 1),
    (1, 4, 2, 2, torch.float16, 8, 2),
    (4, 2, 3, 5, torch.float16, 2, 1),
]


@pytest.mark.parametrize("case", MHA_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[4]}-ps{c[5]}")
def test_mha_views_address_the_previous_formula(case, device, seed):
    layers, heads, head_dim, v_head_dim, dtype, ps, view_ps = case
    rng = random.Random(seed)

    def spec(name, n, grow):
        return MHASubPoolSpec(
            name=name,
            layer_num=n,
            grow_direction=grow,
            head_num=heads,
            head_dim=head_dim,
            v_head_dim=v_head_dim,
            store_dtype=dtype,
        )

    specs = [spec("full", layers, "up"), spec("swa", layers + 1, "down")]
    pool = UnifiedKVPool(total_bytes=1 << 15, sub_pool_specs=specs, device=device, page_size=ps)
    raw = pool._raw
    size = _size(dtype)
    for s in specs:
        k, v = pool.mha_views_for(s.name, view_ps)
        assert len(k) == len(v) == s.layer_num
        # The oracle: the formulas of specs.py and UnifiedKVPool._build_mha_views before.
        num_pages = pool.max_slots(s.name) // view_ps
        page = view_ps * s.entry_bytes() // size
        k_row, v_row = s.head_num * s.head_dim * size, s.head_num * s.v_head_dim * size
        for layer in range(s.layer_num):
            k_at = layer * view_ps * (k_row + v_row)
            v_at = k_at + view_ps * k_row
            assert s.layer_k_offset_in_page(layer, view_ps) == k_at
            assert s.layer_v_offset_in_page(layer, view_ps) == v_at
            _check_view(
                raw,
                k[layer],
                (num_pages, view_ps, s.head_num, s.head_dim),
                (page, s.head_num * s.head_dim, s.head_dim, 1),
                k_at,
                rng,
            )
            _check_view(
                raw,
                v[layer],
                (num_pages, view_ps, s.head_num, s.v_head_dim),
                (page, s.head_num * s.v_head_dim, s.v_head_dim, 1),
                v_at,
                rng,
            )
        # A transfer engine's page: per layer the K block, then the V block.
        kv = UnifiedMHATokenToKVPool(
            unified_buffer=pool, sub_pool_name=s.name, page_size=ps, view_page_size=view_ps
        )
        transfer = kv.transfer_layout()
        assert transfer.layers == s.layer_num and transfer.view_page_size == view_ps
        assert transfer.block_offsets == [0, view_ps * k_row]
        assert transfer.row_bytes == [k_row, v_row]


MLA_CASES = [(3, 6, 2, torch.bfloat16, 2), (1, 4, 4, torch.float32, 1), (4, 8, 8, torch.float16, 4)]


@pytest.mark.parametrize("case", MLA_CASES, ids=lambda c: f"{c[0]}x{c[1]}+{c[2]}-{c[3]}-ps{c[4]}")
def test_dense_mla_views_address_the_previous_formula(case, device, seed):
    layers, lora, rope, dtype, ps = case
    rng = random.Random(seed)
    full = MLASubPoolSpec(
        name="full",
        layer_num=layers,
        grow_direction="up",
        kv_lora_rank=lora,
        qk_rope_head_dim=rope,
        store_dtype=dtype,
    )
    swa = MHASubPoolSpec(
        name="swa",
        layer_num=1,
        grow_direction="down",
        head_num=1,
        head_dim=4,
        store_dtype=dtype,
    )
    pool = UnifiedKVPool(
        total_bytes=1 << 14,
        sub_pool_specs=[full, swa],
        device=device,
        page_size=ps,
        view_tail_pad_bytes=ps * full.entry_bytes(),
    )
    dim, size = full.kv_cache_dim, _size(dtype)
    num_pages = pool.max_slots("full") // ps
    other = torch.zeros(64 + (num_pages + 1) * ps * full.entry_bytes(), dtype=torch.uint8)
    built = build_dense_mla_views(
        other,
        layer_num=layers,
        kv_cache_dim=dim,
        store_dtype=dtype,
        page_size=ps,
        num_pages=num_pages,
        anchor_bytes=64,
    )
    for anchor, views, raw in ((0, pool.mla_views_for("full"), pool._raw), (64, built, other)):
        assert len(views) == layers
        for layer, view in enumerate(views):
            # The oracle: page_major.build_dense_mla_views' formula before.
            _check_view(
                raw,
                view,
                (num_pages * layers * ps, 1, dim),
                (dim, dim, 1),
                anchor + layer * ps * dim * size,
                rng,
            )


MAMBA_CASES = [
    (2, ((4, 3),), torch.bfloat16, (2, 4, 4), torch.float32),
    (3, ((4, 3), (2,)), torch.float32, (2, 2, 2), torch.float32),
    (1, ((6,), (1, 2, 2, 2)), torch.float16, (), torch.float16),
]


def _old_mamba_views(raw, layer_num, conv_state_shapes, conv_dtype, temporal_shape, temporal_dtype):
    """The oracle: build_page_major_mamba_views' shapes, strides and byte offsets before."""

    def prod(shape):
        out = 1
        for x in shape:
            out *= x
        return out

    conv = sum(prod(s) for s in conv_state_shapes) * _size(conv_dtype)
    entry = layer_num * (conv + prod(temporal_shape) * _size(temporal_dtype))
    slots = raw.numel() // entry
    out, offset = [], 0
    tensors = [(s, conv_dtype) for s in conv_state_shapes] + [(temporal_shape, temporal_dtype)]
    for shape, dtype in tensors:
        size, inner = _size(dtype), prod(shape)
        strides, acc = [], 1
        for dim in reversed(shape):
            strides.insert(0, acc)
            acc *= dim
        out.append(((layer_num, slots, *shape), (inner, entry // size, *strides), offset))
        offset += layer_num * inner * size
    return out


@pytest.mark.parametrize("case", MAMBA_CASES, ids=lambda c: f"{c[0]}-{len(c[1])}conv-{c[2]}")
def test_mamba_views_address_the_previous_formula(case, device, seed):
    layers, conv_shapes, conv_dtype, temporal_shape, temporal_dtype = case
    rng = random.Random(seed)
    spec = MambaSubPoolSpec(
        name="mamba",
        layer_num=layers,
        grow_direction="up",
        conv_state_shapes=conv_shapes,
        conv_dtype=conv_dtype,
        temporal_state_shape=temporal_shape,
        temporal_dtype=temporal_dtype,
    )
    full = MHASubPoolSpec(
        name="full",
        layer_num=1,
        grow_direction="down",
        head_num=1,
        head_dim=4,
        store_dtype=torch.float16,
    )
    pool = UnifiedKVPool(total_bytes=1 << 14, sub_pool_specs=[full, spec], device=device)
    conv, temporal = pool.mamba_views_for("mamba")
    slots = pool.max_slots("mamba")
    raw = pool._raw
    oracle = _old_mamba_views(
        raw[: slots * spec.entry_bytes()],
        layers,
        conv_shapes,
        conv_dtype,
        temporal_shape,
        temporal_dtype,
    )
    assert len(conv) == len(conv_shapes)
    for view, (shape, strides, offset) in zip(conv + [temporal], oracle):
        _check_view(raw, view, shape, strides, offset, rng)
    # The public builder over another buffer, from an anchor.
    other = torch.zeros(32 + 3 * spec.entry_bytes(), dtype=torch.uint8)
    conv, temporal = build_page_major_mamba_views(
        other,
        layer_num=layers,
        conv_state_shapes=conv_shapes,
        conv_dtype=conv_dtype,
        temporal_state_shape=temporal_shape,
        temporal_dtype=temporal_dtype,
        max_slots=3,
        anchor_bytes=32,
    )
    oracle = _old_mamba_views(
        other[32:], layers, conv_shapes, conv_dtype, temporal_shape, temporal_dtype
    )
    for view, (shape, strides, offset) in zip(conv + [temporal], oracle):
        _check_view(other, view, shape, strides, 32 + offset, rng)


def test_bad_geometry_is_refused_naming_it():
    mha = dict(
        layers=2,
        head_num=2,
        head_dim=4,
        v_head_dim=4,
        dtype=torch.bfloat16,
        page_size=4,
        num_pages=3,
    )
    with pytest.raises(InvalidArgumentError, match="heads must be > 0"):
        layout.mha_view_descriptors(**{**mha, "head_num": 0})
    with pytest.raises(InvalidArgumentError, match="page_size must be > 0"):
        layout.mha_view_descriptors(**{**mha, "page_size": 0})
    with pytest.raises(InvalidArgumentError, match="1, 2 or 4 bytes"):
        layout.mha_view_descriptors(**{**mha, "dtype": torch.float64})
    with pytest.raises(InvalidArgumentError, match="kv_cache_dim"):
        layout.mla_view_descriptors(
            layers=2, kv_cache_dim=0, dtype=torch.float16, page_size=1, num_pages=2
        )
    with pytest.raises(InvalidArgumentError, match="misaligned"):
        layout.mamba_view_descriptors(
            layers=1,
            conv_state_shapes=((3,),),
            conv_dtype=torch.uint8,
            temporal_state_shape=(2,),
            temporal_dtype=torch.float32,
            slots=2,
        )
    with pytest.raises(InvalidArgumentError, match="at most 4"):
        layout.mamba_view_descriptors(
            layers=1,
            conv_state_shapes=((1, 1, 1, 1, 1),),
            conv_dtype=torch.float16,
            temporal_state_shape=(2,),
            temporal_dtype=torch.float32,
            slots=2,
        )
    descriptors = layout.mha_view_descriptors(**mha)
    raw = torch.zeros(100, dtype=torch.uint8)
    with pytest.raises(InvalidArgumentError, match="ends at byte"):
        layout.views_from_descriptors(raw, descriptors)
    with pytest.raises(InvalidArgumentError, match="4-byte|2-byte"):
        layout.views_from_descriptors(
            torch.zeros(1 << 12, dtype=torch.uint8), descriptors, torch.float32
        )
    assert not bool(raw.any())


STALE = 0xA5
MAMBA_STATE_CASES = [
    # layers, conv_dim, conv_width, conv_dtype, heads, head_dim, state_dim, temporal_dtype,
    # padding bytes a slot holds
    (2, 3, 3, torch.bfloat16, 2, 2, 3, torch.float32, 2 * 2),  # conv 18 bytes -> 20
    (3, 2, 2, torch.float32, 1, 3, 1, torch.bfloat16, 3 * 2),  # temporal 6 bytes -> 8
    (1, 4, 3, torch.float16, 2, 2, 2, torch.bfloat16, 0),
]


def _state_geometry(case):
    names = "layers conv_dim conv_width conv_dtype heads head_dim state_dim temporal_dtype"
    return dict(zip(names.split(), case[:8]))


@pytest.mark.parametrize("case", MAMBA_STATE_CASES, ids=lambda c: f"{c[3]}-{c[7]}-pad{c[8]}")
def test_padded_mamba_state_views_alias_the_bytes_the_library_writes(case, device, seed):
    """kvpool.native's padded Mamba state views (from C's descriptors): each slot's views hold
    its page's bytes but the padding, each byte once; a slot the library zeroes on handout
    (its whole page, padding included) reads zero through the views and no other slot moves."""
    rng = random.Random(seed)
    g = _state_geometry(case)
    padding = case[8]
    entry = layout.mamba_state_entry_bytes(**g)
    rows = g["layers"] * (
        g["conv_dim"] * g["conv_width"] * _size(g["conv_dtype"])
        + g["heads"] * g["head_dim"] * g["state_dim"] * _size(g["temporal_dtype"])
    )
    assert entry == rows + padding
    slots, tail = 8, 16
    buffer = native.UnifiedKVPool(slots * entry + tail, [("mamba", entry, 1, "down")], device)
    side = native.MultiEndedAllocator.create(buffer, "mamba", native.allocator_options(zero_on_alloc=True))
    views = side.mamba_state_views(**g)
    assert len(views.conv) == len(views.temporal) == g["layers"]
    assert tuple(views.conv[0].shape) == (slots, g["conv_dim"], g["conv_width"])
    assert tuple(views.temporal[0].shape) == (slots, g["heads"], g["head_dim"], g["state_dim"])
    raw = buffer.bytes
    pages = slice(0, slots * entry)

    # Zeroing every view leaves exactly the padding of each page and the tail.
    raw.fill_(STALE)
    for v in views.conv + views.temporal:
        v.zero_()
    image = raw.cpu()
    for p in range(slots):
        page = image[p * entry : (p + 1) * entry]
        assert int((page == 0).sum()) == rows, f"slot {p}"
        assert int((page == STALE).sum()) == padding, f"slot {p}"
    assert bool((image[slots * entry :] == STALE).all())

    # Stamps per slot and layer, then the library zeroes the slots it hands out.
    raw[pages].fill_(STALE)
    stamps = {}
    for s in range(slots):
        for layer in range(g["layers"]):
            stamps[s, layer] = (rng.randrange(1, 60), rng.randrange(1, 60))
            views.conv[layer][s].fill_(stamps[s, layer][0])
            views.temporal[layer][s].fill_(stamps[s, layer][1])
    before = raw.cpu()
    ids = side.alloc(rng.randrange(1, slots - 1))
    assert ids is not None
    v2p, _ = side.tables()
    handed = {int(p) for p in v2p[ids.long()].cpu()}
    image = raw.cpu()
    for s in range(slots):
        page = slice(s * entry, (s + 1) * entry)
        if s in handed:
            assert not bool(image[page].any()), f"slot {s}: its page is not zero"
        else:
            assert torch.equal(image[page], before[page]), f"slot {s} changed"
        for layer in range(g["layers"]):
            conv, temporal = stamps[s, layer] if s not in handed else (0, 0)
            assert bool((views.conv[layer][s] == conv).all()), (s, layer)
            assert bool((views.temporal[layer][s] == temporal).all()), (s, layer)
    assert bool((image[slots * entry :] == STALE).all())


def test_padded_mamba_state_views_refuse_a_side_that_does_not_hold_them():
    g = _state_geometry(MAMBA_STATE_CASES[0])
    entry = layout.mamba_state_entry_bytes(**g)
    buffer = native.UnifiedKVPool(
        1 << 12, [("state", entry, 1, "up"), ("paged", entry, 2, "down")], "cpu"
    )
    state = native.MultiEndedAllocator.create(buffer, "state", native.allocator_options())
    paged = native.MultiEndedAllocator.create(buffer, "paged", native.allocator_options())
    with pytest.raises(InvalidArgumentError, match="page_size 2"):
        paged.mamba_state_views(**g)
    with pytest.raises(InvalidArgumentError, match=f"entry_bytes {entry}; this state needs"):
        state.mamba_state_views(**{**g, "state_dim": g["state_dim"] + 1})
    with pytest.raises(InvalidArgumentError, match="state_dim must be > 0"):
        layout.mamba_state_view_descriptors(**{**g, "state_dim": 0}, slots=2)
    with pytest.raises(InvalidArgumentError, match="anchor_bytes 2"):
        layout.mamba_state_view_descriptors(**g, slots=2, anchor_bytes=2)
