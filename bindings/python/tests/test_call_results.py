"""The tensors the allocation and translation calls return belong to the caller: each one fresh
(its own memory, no view of another tensor), int64 and contiguous on the pool's device, so that
an engine may keep or overwrite one without touching kvpool's state or another result. The calls
reuse what they can between calls (the result flag, an empty tensor whose new_empty makes each
result); these tests keep that reuse away from the results."""

import pytest
import torch

from support import swa_allocator


def _fresh(results, device):
    spans = []
    for r in results:
        assert r is not None, "an allocation that fits failed"
        assert r._base is None, "a result is a view of another tensor"
        assert r.dtype == torch.int64 and r.is_contiguous()
        assert r.device.type == torch.device(device).type
        spans.append((r.data_ptr(), r.data_ptr() + 8 * r.numel()))
    spans.sort()
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start, "two results share memory"


@pytest.mark.parametrize("page_size", [1, 4])
def test_allocation_results_are_fresh_and_the_callers(device, page_size):
    ps = page_size
    alloc = swa_allocator(device, ps, lazy=False)
    results = [alloc.alloc(2 * ps), alloc.alloc(2 * ps)]
    zeros = torch.zeros(2, dtype=torch.int64)
    seq = torch.tensor([ps, 2 * ps], dtype=torch.int64)
    none = torch.full((2,), -1, dtype=torch.int64, device=device)
    extend = alloc.alloc_extend(zeros.to(device), zeros, seq.to(device), seq, none, 3 * ps)
    last = torch.stack([extend[ps - 1], extend[-1]])
    decode = alloc.alloc_decode((seq + 1).to(device), seq + 1, last)
    results += [extend, decode]
    _fresh(results, device)
    ids = torch.cat([r.cpu() for r in results])
    assert ids.unique().numel() == ids.numel(), "an id was handed out twice"

    # Overwriting the results changes nothing of kvpool's: the next allocation gets new ids.
    for r in results:
        r.fill_(-7)
    alloc.check_invariants()
    again = alloc.alloc(ps)
    _fresh(results + [again], device)
    assert not bool((again == -7).any())
    assert not set(again.cpu().tolist()) & set(ids.tolist()), "a live id was handed out again"
    alloc.check_invariants()


def test_translation_without_out_returns_a_fresh_tensor(device):
    alloc = swa_allocator(device, 4, lazy=False)
    virt = alloc.alloc(8)
    first = alloc.translate_kv_loc(virt)
    second = alloc.translate_kv_loc(virt)
    _fresh([virt, first, second], device)
    assert torch.equal(first, second)
    first.fill_(-7)
    assert torch.equal(alloc.translate_kv_loc(virt), second)
    alloc.check_invariants()
