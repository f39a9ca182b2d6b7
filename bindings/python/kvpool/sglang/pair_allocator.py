"""What the SWA, the Mamba and the tri-pool composite share: a MultiEndedAllocator over
each side of a kvpool pair (or of the tri-pool), state windows over every side, and the
forward-event hooks."""

from typing import Optional

import torch

from .base import BaseTokenToKVPoolAllocator, InflightForward
from .multi_ended_allocator import MultiEndedAllocator


class PairAllocator(BaseTokenToKVPoolAllocator):
    # Whether the forward writes each side at out_cache_loc (KV sides do; Mamba
    # state is written by the state kernels, not through it).
    _sides_written = (True, True)

    def _init_pair(
        self,
        pair,
        lazy_compaction,
        sides,
        kvcache,
        unified_buffer,
        device,
        need_sort,
        forward_stream,
        allocator_classes=None,
    ):
        """pair: a kvpool.native pair or tri-pool; sides: (sub-pool, kvcache attribute, page
        size) of each of its sides; allocator_classes: the MultiEndedAllocator class of each
        (default: MultiEndedAllocator). Returns their MultiEndedAllocators; the first two are
        each other's peer."""
        self.unified_buffer = unified_buffer
        self.lazy_compaction = lazy_compaction
        self._pair = pair
        self._inflight = InflightForward()
        classes = allocator_classes or [MultiEndedAllocator] * len(sides)
        self._sides = [
            cls._over(
                side,
                kvcache=getattr(kvcache, attribute, None),
                unified_buffer=unified_buffer,
                sub_pool_name=name,
                device=device,
                page_size=page_size,
                need_sort=need_sort,
                forward_stream=forward_stream,
                inflight=self._inflight,
            )
            for side, (name, attribute, page_size), cls in zip(pair.sides, sides, classes)
        ]
        self._sides[0]._peer, self._sides[1]._peer = self._sides[1], self._sides[0]
        unified_buffer._fix_layout(pair.buffer)
        self.free_pages = torch.empty(0, dtype=torch.int64, device=self.device)
        self.release_pages = torch.empty(0, dtype=torch.int64, device=self.device)
        return self._sides

    # -- eviction across the sides --
    def set_eviction_callback(self, evict) -> None:
        """evict(shortfall) -> bytes freed (0, False or None: nothing more to free), called
        when an allocation falls short, before it fails; the allocation is tried again
        after each call (kvpool.native's set_eviction_callback; shortfall: an
        EvictionShortfall with side, pages, bytes, requested_pages). evict frees finished
        requests through this allocator's free calls, on any side. None removes it."""
        self._pair.set_eviction_callback(evict)

    # -- state --
    def _native_digests(self):
        """The composite's (every side's tables), then each side allocator's free group."""
        return (self._pair.state_digest(), *(v for s in self._sides for v in s._free_group_state()))

    def backup_state(self):
        """A backup window over every side (the reference returns one state per side)."""
        return self._pair.backup_state()

    def restore_state(self, state):
        """Undoes every allocation on every side since backup_state(), atomically (a bad or
        stale state raises and changes no side); returns the relocations recorded in the
        window (none: kvpool refuses frees inside it)."""
        self._inflight.settle()
        self._pair.restore_state(state)
        return []

    def commit_state(self, state):
        """Keeps the allocations since backup_state() and closes the window (kvpool's addition:
        the reference has no window to close)."""
        self._pair.commit_state(state)

    def clear(self) -> None:
        for side in self._sides:
            side.clear()
        self.is_not_in_free_group = True
        self.free_group = []

    def check_invariants(self) -> None:
        """Every side's host state and device tables checked (synchronises the stream)."""
        for side in self._sides:
            side.check_invariants()

    # -- lazy compaction hooks --
    def set_latest_forward_done_event(self, event) -> None:
        self._pair.set_latest_forward_done(event)

    def set_inflight_forward(
        self, forward_done, out_cache_loc_virtual: Optional[torch.Tensor]
    ) -> None:
        if not self.lazy_compaction:
            return
        self._inflight.set(
            list(zip(self._pair.sides, self._sides_written)), forward_done, out_cache_loc_virtual
        )

    def flush_opportunistic(self) -> int:
        if not self.lazy_compaction:
            return 0
        self._inflight.settle()
        return self._pair.flush_opportunistic()
