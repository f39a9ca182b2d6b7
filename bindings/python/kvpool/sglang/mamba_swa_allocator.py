"""UnifiedMambaSWATokenToKVPoolAllocator: the tri-pool with the reference's surface, for
models with full attention, sliding-window attention and Mamba (or linear-attention)
state. One UnifiedKVPool holds three sub-pools, from the low end up: Mamba state slots
("mamba", grow_direction "up"), sliding-window KV ("swa", "floating", starting at its
spec's float_at) and full KV ("full", "down").

KV allocation, translation and frees are the SWA pair's (the full side mints the ids,
the sliding-window side binds them, both or neither); state slots come from
``mamba_allocator``, whose allocations take the tri-pool's shortfall ladder (the
floating band shifts out of the way, a lazy full side flushes).
"""

from typing import Optional

import torch

from .. import native
from .._tensors import pool_device
from .multi_ended_allocator import MultiEndedAllocator, allocator_options
from .swa_allocator import FullAndSWAKVAllocator
from .swa_pages import swa_page_size_of


class _StateSlotAllocator(MultiEndedAllocator):
    """The tri-pool's state side: its allocations go through the tri-pool."""

    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        self._inflight.settle()
        if need_size <= 0:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        return self._pair.alloc_state_slots(need_size)


class UnifiedMambaSWATokenToKVPoolAllocator(FullAndSWAKVAllocator):
    _sides_written = (True, True, False)  # Mamba state is not written through out_cache_loc

    def __init__(
        self,
        *,
        unified_buffer,
        kvcache,
        device: str,
        page_size: int = 1,
        need_sort: bool = False,
        forward_stream: Optional[torch.cuda.Stream] = None,
        lazy_compaction: bool = False,
        full_max_moves_per_call: Optional[int] = None,
        swa_max_moves_per_call: Optional[int] = None,
        mamba_max_moves_per_call: Optional[int] = None,
        full_zero_on_alloc: bool = False,
        swa_zero_on_alloc: bool = False,
        mamba_zero_on_alloc: bool = False,
        eviction_callback=None,
        swa_page_size: Optional[int] = None,
    ):
        """kvcache: None, or an object with ``full_kv_pool``, ``swa_kv_pool`` and
        ``mamba_pool`` (kvpool's page-major pools over the same sub-pools, or an engine's
        own, moved through the reference's kvcache protocol).

        swa_page_size (kvpool's addition; None: page_size): the SWA side's own page size,
        a divisor of page_size, as on UnifiedSWATokenToKVPoolAllocator (each full page
        binds page_size // swa_page_size SWA pages, free_swa releases at that grain); a
        kvcache's SWA views must be laid out with it. Anything else raises ValueError,
        building nothing."""
        swa_ps = swa_page_size_of(page_size, swa_page_size)
        super().__init__(
            unified_buffer.max_slots("full") - 1,
            page_size,
            unified_buffer.mha_spec("full").store_dtype,
            pool_device(device),
            kvcache,
            need_sort,
        )
        composite = native.UnifiedMambaSWAAllocator(
            unified_buffer._native_for({"full": page_size, "swa": swa_ps, "mamba": 1}),
            allocator_options(lazy_compaction, full_max_moves_per_call, zero_on_alloc=full_zero_on_alloc),
            allocator_options(lazy_compaction, swa_max_moves_per_call, zero_on_alloc=swa_zero_on_alloc),
            allocator_options(
                lazy_compaction, mamba_max_moves_per_call, zero_on_alloc=mamba_zero_on_alloc
            ),
        )
        (
            self.full_attn_allocator,
            self.swa_attn_allocator,
            self.mamba_allocator,
        ) = self._init_pair(
            composite,
            lazy_compaction,
            (
                ("full", "full_kv_pool", page_size),
                ("swa", "swa_kv_pool", swa_ps),
                ("mamba", "mamba_pool", 1),
            ),
            kvcache,
            unified_buffer,
            device,
            need_sort,
            forward_stream,
            allocator_classes=(MultiEndedAllocator, MultiEndedAllocator, _StateSlotAllocator),
        )
        self.mamba_allocator._pair = composite
        if eviction_callback is not None:
            self.set_eviction_callback(eviction_callback)

    # -- sizes (tokens; state slots) --
    @property
    def size(self) -> int:
        fa = self.full_attn_allocator
        return fa.schedulable_available_size() + fa.allocated_count()

    @size.setter
    def size(self, value) -> None:
        pass  # the base sets it; computed from the sides

    @property
    def size_full(self) -> int:
        return self.full_attn_allocator.max_slots - 1

    @property
    def size_swa(self) -> int:
        return self.swa_attn_allocator.max_slots - 1

    @property
    def size_mamba(self) -> int:
        return self.mamba_allocator.max_slots - 1

    def available_size(self) -> int:
        """KV tokens one alloc / alloc_extend always gets now (both KV sides, the floating
        band's shift included)."""
        return self._pair.sizes().available_size

    def full_available_size(self) -> int:
        return self.full_attn_allocator.schedulable_available_size()

    def swa_available_size(self) -> int:
        return self.swa_attn_allocator.schedulable_available_size()

    def mamba_available_size(self) -> int:
        """State slots one allocation always gets now (the floating band's shift included)."""
        return self._pair.sizes().state_slots_available

    def mamba_slot_full_token_cost(self) -> int:
        """Full-token equivalents of free bytes one state slot takes (rounded up)."""
        return self._pair.sizes().state_slot_full_token_cost

    def debug_print(self) -> str:
        return (
            f"#full-available={self.full_attn_allocator.available_size()}, "
            f"#swa-available={self.swa_attn_allocator.available_size()}, "
            f"#mamba-available={self.mamba_allocator.available_size()}, "
            f"#joint-available={self.available_size()}"
        )

    def clear(self) -> None:
        """Frees everything; the floating band starts where the layout puts it again."""
        self._inflight.settle()
        self._pair.clear()
        self.is_not_in_free_group = True
        self.free_group = []
