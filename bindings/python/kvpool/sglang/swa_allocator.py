"""UnifiedSWATokenToKVPoolAllocator: the SWA pair with the reference's surface.

The full side mints the virtual ids and the SWA side binds the same ids; every
allocation binds both sides or neither, in one kvpool call.
"""

from typing import Optional

import torch

from .. import native
from .._tensors import pool_device
from .multi_ended_allocator import allocator_options
from .pair_allocator import PairAllocator
from .swa_pages import swa_page_size_of


class FullAndSWAKVAllocator(PairAllocator):
    """KV allocation, translation and frees over a full side that mints the virtual ids
    (``full_attn_allocator``) and a sliding-window side that binds them
    (``swa_attn_allocator``), both or neither in one kvpool call: what the SWA pair and
    the tri-pool share. ``_pair``: their kvpool.native composite."""

    # -- translate --
    def translate_kv_loc(
        self, loc: torch.Tensor, *, out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        return self.full_attn_allocator.translate_kv_loc(loc, out=out)

    def translate_loc_from_full_to_swa(
        self, kv_indices: torch.Tensor, *, out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """Virtual token ids -> SWA-physical token ids, int32; ``out=`` int32, same shape."""
        return self._pair.swa.translate_into(
            kv_indices, out, torch.int32, "translate_loc_from_full_to_swa"
        )

    # -- allocation: both sides or neither --
    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        self._inflight.settle()
        if need_size <= 0:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        return self._pair.alloc(need_size)

    def alloc_extend(
        self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc, extend_num_tokens: int
    ) -> Optional[torch.Tensor]:
        self._inflight.settle()
        return self._pair.alloc_extend(prefix_lens_cpu, seq_lens_cpu, last_loc, extend_num_tokens)

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc) -> Optional[torch.Tensor]:
        self._inflight.settle()
        return self._pair.alloc_decode(seq_lens_cpu, last_loc)

    def is_slot_allocated(self, slot: int) -> bool:
        return self.full_attn_allocator.is_slot_allocated(slot)

    def allocator_state_str(self) -> str:
        return self.full_attn_allocator.allocator_state_str()

    # -- free --
    def free(self, free_index) -> None:
        """Both sides; SWA pages already released by free_swa are skipped."""
        if self._grouped(free_index):
            return
        self._pair.free(free_index)

    def free_swa(self, free_index) -> None:
        """Tokens that left the window: their SWA pages only; the ids stay live."""
        if free_index is None or (isinstance(free_index, torch.Tensor) and free_index.numel() == 0):
            return
        self._pair.free_swa(free_index)

    def set_full_to_swa_mapping(self, full_indices, swa_indices) -> None:
        """The SWA side's v2p is the mapping; nothing to record."""


class UnifiedSWATokenToKVPoolAllocator(FullAndSWAKVAllocator):
    def __init__(
        self,
        *,
        unified_buffer,
        kvcache,
        device: str,
        full_max_total_num_tokens: int,
        swa_max_total_num_tokens: int,
        page_size: int = 1,
        need_sort: bool = False,
        forward_stream: Optional[torch.cuda.Stream] = None,
        lazy_compaction: bool = False,
        full_max_moves_per_call: Optional[int] = None,
        swa_max_moves_per_call: Optional[int] = None,
        full_zero_on_alloc: bool = False,
        swa_zero_on_alloc: bool = False,
        eviction_callback=None,
        swa_page_size: Optional[int] = None,
    ):
        """swa_page_size (kvpool's addition; None: page_size): the SWA side's own page size,
        a divisor of page_size (each full page binds page_size // swa_page_size SWA pages,
        free_swa releases at that grain); a kvcache's SWA views must be laid out with it
        (UnifiedSWAKVPool's swa_page_size). Anything else raises ValueError, building
        nothing."""
        swa_ps = swa_page_size_of(page_size, swa_page_size)
        self._size_full = full_max_total_num_tokens
        self._size_swa = swa_max_total_num_tokens
        self._full_max_total_num_tokens = full_max_total_num_tokens
        self._swa_max_total_num_tokens = swa_max_total_num_tokens
        super().__init__(
            full_max_total_num_tokens,
            page_size,
            unified_buffer.mha_spec("full").store_dtype,
            pool_device(device),
            kvcache,
            need_sort,
        )
        self.full_attn_allocator, self.swa_attn_allocator = self._init_pair(
            native.UnifiedSWAAllocator(
                unified_buffer._native_for({"full": page_size, "swa": swa_ps}),
                allocator_options(lazy_compaction, full_max_moves_per_call, zero_on_alloc=full_zero_on_alloc),
                allocator_options(lazy_compaction, swa_max_moves_per_call, zero_on_alloc=swa_zero_on_alloc),
            ),
            lazy_compaction,
            (("full", "full_kv_pool", page_size), ("swa", "swa_kv_pool", swa_ps)),
            kvcache,
            unified_buffer,
            device,
            need_sort,
            forward_stream,
        )
        if kvcache is not None and hasattr(kvcache, "attach_allocators"):
            kvcache.attach_allocators(
                full_allocator=self.full_attn_allocator, swa_allocator=self.swa_attn_allocator
            )
        if eviction_callback is not None:
            self.set_eviction_callback(eviction_callback)

    # -- sizes (tokens) --
    @property
    def size(self) -> int:
        return min(self._size_full, self._size_swa)

    @size.setter
    def size(self, value) -> None:
        pass  # the base sets it; the static caps answer

    @property
    def size_full(self) -> int:
        return self._size_full

    @property
    def size_swa(self) -> int:
        return self._size_swa

    def available_size(self) -> int:
        """Joint: what one alloc / alloc_extend can take now (both sides)."""
        return self._pair.sizes().available_size

    def _conserve_full_available_size(self) -> int:
        return self._full_max_total_num_tokens - self.full_attn_allocator.allocated_count()

    def _conserve_swa_available_size(self) -> int:
        return self._swa_max_total_num_tokens - self.swa_attn_allocator.allocated_count()

    def schedulable_full_available_size(self) -> int:
        return self.full_attn_allocator.schedulable_available_size()

    def schedulable_swa_available_size(self) -> int:
        return self.swa_attn_allocator.schedulable_available_size()

    def full_available_size(self) -> int:
        return min(self._conserve_full_available_size(), self.schedulable_full_available_size())

    def swa_available_size(self) -> int:
        return min(self._conserve_swa_available_size(), self.schedulable_swa_available_size())

    def debug_print(self) -> str:
        return (
            f"#full-available={self.full_attn_allocator.available_size()}, "
            f"#swa-available={self.swa_attn_allocator.available_size()}, "
            f"#joint-available={self.available_size()}"
        )
