"""What every SGLang-compatible allocator shares: the base attributes of the
reference's BaseTokenToKVPoolAllocator, free groups, and the forward-event hooks."""

import torch

from .. import native
from .._tensors import host_ids
from .._tokens import token_handle


class BaseTokenToKVPoolAllocator:
    def __init__(self, size, page_size, dtype, device, kvcache, need_sort):
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.device = device
        self._kvcache = kvcache
        self.need_sort = need_sort
        self.free_pages = None
        self.release_pages = None
        self.is_not_in_free_group = True
        self.free_group = []

    def get_kvcache(self):
        return self._kvcache

    def debug_print(self) -> str:
        return ""

    def state_digest(self) -> int:
        """A 64-bit digest (int) of the host state that decides this allocator's future
        calls: kvpool's tables (kvpool.native's state_digest) and the free group queued
        here (whether one is open, the length of each free in it). Equal on tensor-parallel
        ranks driven with the same calls, which compare it (README, "Tensor-parallel
        ranks"). Host only: no device read, no synchronisation."""
        return combine_digests(*self._native_digests(), *self._free_group_state())

    def _native_digests(self):
        raise NotImplementedError

    def _free_group_state(self):
        sizes = [x.numel() if isinstance(x, torch.Tensor) else len(x) for x in self.free_group]
        return (int(self.is_not_in_free_group), len(sizes), *sizes)

    def merge_and_sort_free(self):
        """kvpool hands out free ids in its own order (the reference's); nothing to sort."""

    # -- free groups: frees inside a group become one free at its end, as in the reference --
    def free_group_begin(self) -> None:
        self.is_not_in_free_group = False
        self.free_group = []

    def free_group_end(self) -> None:
        self.is_not_in_free_group = True
        if self.free_group:
            # kvpool reads freed ids on the host: gather them there (each device tensor once).
            merged = torch.cat(
                [torch.as_tensor(x).reshape(-1).to("cpu", torch.int64) for x in self.free_group]
            )
            self.free_group = []
            self.free(merged)

    def _grouped(self, free_index) -> bool:
        """True when the free is deferred to the group's end (or there is nothing to free)."""
        if free_index is None or (isinstance(free_index, torch.Tensor) and free_index.numel() == 0):
            return True
        if not self.is_not_in_free_group:
            self.free_group.append(free_index)
            return True
        return False


_MASK = (1 << 64) - 1


def combine_digests(*values) -> int:
    """Chains 64-bit values as kvpool's StateDigest::add does (splitmix64's bijective mix per
    value), so that a difference in any one value changes the result."""
    h = 0xCBF29CE484222325
    for value in values:
        z = h ^ (int(value) & _MASK)
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        h = ((z ^ (z >> 31)) + 0x9E3779B97F4A7C15) & _MASK
    return h


class InflightForward:
    """The in-flight forward's write set, handed to kvpool's sides before their next call.

    kvpool needs the virtual ids on the host. The reference keeps the device
    tensor and copies it when a flush needs it; here the copy to pinned host
    memory starts at once, without a synchronisation, and is waited for only
    before the next call that may flush (allocations, flushes), and only if the
    forward is still running then (otherwise there is nothing to protect).
    """

    def __init__(self):
        self._pending = None

    def set(self, sides, forward_done, virtual_tokens):
        """sides: [(native MultiEndedAllocator, whether it gets the write set)]."""
        if virtual_tokens is not None and virtual_tokens.device.type == "cuda":
            host = torch.empty(virtual_tokens.numel(), dtype=torch.int64, pin_memory=True)
            host.copy_(virtual_tokens.reshape(-1), non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
            self._pending = (sides, forward_done, host, copied)
            return
        self._pending = None
        self._hand_over(sides, forward_done, virtual_tokens)

    def settle(self):
        if self._pending is None:
            return
        sides, forward_done, host, copied = self._pending
        self._pending = None
        if forward_done is None or forward_done.query():
            self._hand_over(sides, forward_done, None)
            return
        copied.synchronize()
        self._hand_over(sides, forward_done, host)

    @staticmethod
    def _hand_over(sides, forward_done, virtual_tokens):
        ids = host_ids(virtual_tokens, "out_cache_loc") if virtual_tokens is not None else None
        _token, handle = token_handle(forward_done)
        for side, writes in sides:
            side.set_inflight_forward(handle, ids.array if (writes and ids is not None) else None)


def set_latest_forward_done(sides, event):
    native.set_forward_done(sides, event)
