"""Lazy compaction over thousands of serving steps: no page is lost, nothing leaks,
and the data stays where translate says it is."""

import pytest
import torch

from support import rng_for
from test_swa_pair import SwaWorld, step


@pytest.mark.parametrize("page_size", [1, 16])
def test_lazy_churn_loses_no_page(device, seed, page_size):
    rng = rng_for(seed + 77)
    w = SwaWorld(device, page_size, True, "unified", total_bytes=1 << 17)
    w.check = lambda what: None  # full checks every 100 steps keep the run short
    steps = 3000
    for i in range(steps):
        step(w, rng, True, i)
        if i % 100 == 99:
            SwaWorld.check(w, f"step {i}")
    a = w.alloc
    assert a.full_attn_allocator.counters()["pages_moved"] > 0
    pages = sum(-(-len(t) // page_size) for t in w.requests.values())
    assert a.full_attn_allocator.allocated_count() == pages * page_size
    for r in list(w.requests):
        a.free(torch.tensor(w.requests.pop(r)))
    w.full.stamps.clear()
    w.swa.stamps.clear()
    a.full_attn_allocator._flush(urgent=True)
    a.swa_attn_allocator._flush(urgent=True)
    fresh = SwaWorld(device, page_size, True, "unified", total_bytes=1 << 17)
    assert a.available_size() == fresh.alloc.available_size()
    assert (
        a.full_attn_allocator.watermark_physical
        == fresh.alloc.full_attn_allocator.watermark_physical
    )
    assert (
        a.swa_attn_allocator.watermark_physical == fresh.alloc.swa_attn_allocator.watermark_physical
    )
    SwaWorld.check(w, "all freed")
