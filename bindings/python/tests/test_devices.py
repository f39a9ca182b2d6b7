"""One library serves every device it names in kvpool.devices(): the CPU always, and in a
CUDA (HIP) build the GPU beside it, in one process, the way SGLang's own allocator tests and
CPU-side tools build pools on "cpu" next to an engine on "cuda". An object lives where its
pool lives: its ids, tables and outputs are tensors on that device, and the same calls give
the same results on every device."""

import random
from types import SimpleNamespace

import pytest
import torch

import kvpool
from kvpool import errors, native
from kvpool.sglang import HybridReqToTokenPool, ReqToTokenPool, UnifiedMambaTokenToKVPoolAllocator
from support import mamba_pool, swa_allocator

from conftest import served_devices


def test_the_devices_agree_with_the_build():
    devices = kvpool.devices()
    assert devices[0] == "cpu"
    if kvpool.backend() == "host":
        assert devices == ("cpu",)
    else:
        assert devices == ("cpu", "cuda")


def test_everything_made_from_a_pool_lives_on_its_device(device):
    a = swa_allocator(device, 4, lazy=False)
    ids = a.alloc(16)
    assert ids.device.type == device
    assert a.translate_kv_loc(ids).device.type == device
    assert a.translate_loc_from_full_to_swa(ids).device.type == device
    for side in (a.full_attn_allocator, a.swa_attn_allocator):
        assert side.virtual_to_physical.device.type == device
    a.free(ids[:8].cpu())
    a.check_invariants()

    reqs = ReqToTokenPool(size=4, max_context_len=16, device=device)
    assert reqs.req_to_token.device.type == device
    slots = reqs.alloc([SimpleNamespace(req_pool_idx=None) for _ in range(2)])
    reqs.write((slots[0], slice(0, 8)), ids[8:16])
    assert torch.equal(reqs.req_to_token[slots[0], :8].cpu(), ids[8:16].cpu())

    m = UnifiedMambaTokenToKVPoolAllocator(
        unified_buffer=mamba_pool(device, 1), kvcache=None, device=device
    )
    hybrid = HybridReqToTokenPool(
        size=4, max_context_len=8, device=device, mamba_allocator=m.mamba_allocator
    )
    assert hybrid.req_to_token.device.type == device
    req = SimpleNamespace(req_pool_idx=None, mamba_pool_idx=None)
    assert hybrid.alloc([req]) is not None
    assert req.mamba_pool_idx.device.type == device
    assert hybrid.req_index_to_mamba_index_mapping[req.req_pool_idx].item() == req.mamba_pool_idx


def run_calls(device, seed):
    """A random sequence of an SWA pair's calls on device; what each call returned, on the host."""
    rng = random.Random(seed)
    a = swa_allocator(device, 4, lazy=seed % 2 == 0)
    live, seen = [], []
    for _ in range(60):
        if live and rng.random() < 0.4:
            ids = live.pop(rng.randrange(len(live)))
            a.free(ids.cpu())
            seen.append(("free", a.available_size()))
        else:
            ids = a.alloc(4 * rng.randint(1, 6))
            if ids is None:
                seen.append(("full", a.available_size()))
                continue
            live.append(ids)
            seen.append(("alloc", ids.cpu().tolist(), a.translate_kv_loc(ids).cpu().tolist()))
    a.check_invariants()
    seen.append(a.full_attn_allocator.virtual_to_physical.cpu().tolist())
    return seen


@pytest.mark.skipif(len(served_devices()) < 2, reason="needs a GPU build on a machine with a GPU")
def test_the_same_calls_give_the_same_results_on_every_device(seed):
    first, *others = served_devices()
    expected = run_calls(first, seed)
    for device in others:
        assert run_calls(device, seed) == expected, f"{device} differs from {first}"


@pytest.mark.skipif(len(served_devices()) < 2, reason="needs a GPU build on a machine with a GPU")
def test_sides_on_two_devices_are_not_peers():
    sides = [("full", 64, 4, "up"), ("swa", 64, 4, "down")]
    cpu = native.UnifiedKVPool(1 << 14, sides, "cpu")
    gpu = native.UnifiedKVPool(1 << 14, sides, "cuda")
    up = native.MultiEndedAllocator.create(cpu, "full", native.allocator_options())
    down = native.MultiEndedAllocator.create(gpu, "swa", native.allocator_options())
    with pytest.raises(errors.InvalidArgumentError) as err:
        up.bind_peer(down)
    assert "another device" in err.value.message
    assert up.alloc(8) is not None and down.alloc(8) is not None  # both still usable, unbound
