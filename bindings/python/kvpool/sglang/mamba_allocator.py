"""UnifiedMambaTokenToKVPoolAllocator: full KV ("full", paged) and Mamba state slots
("mamba", page size 1) in one unified buffer, each side owning its ids; and
UnifiedMambaSlotAllocator, the state side as a request table's slot allocator."""

from typing import Optional

import torch

from .. import native
from .._tensors import pool_device
from . import transfer
from .multi_ended_allocator import MultiEndedAllocator, _check_multiplier, allocator_options
from .pair_allocator import PairAllocator


class UnifiedMambaTokenToKVPoolAllocator(PairAllocator):
    _sides_written = (True, False)  # Mamba state is not written through out_cache_loc

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
        mamba_max_moves_per_call: Optional[int] = None,
        full_kernel_page_multiplier: int = 1,
        full_zero_on_alloc: bool = False,
        mamba_zero_on_alloc: bool = False,
        eviction_callback=None,
    ):
        _check_multiplier(full_kernel_page_multiplier)
        super().__init__(
            unified_buffer.max_slots("full") - 1,
            page_size,
            unified_buffer.spec("full").get_dtype(),
            pool_device(device),
            kvcache,
            need_sort,
        )
        self.full_attn_allocator, self.mamba_allocator = self._init_pair(
            native.UnifiedMambaAllocator(
                unified_buffer._native_for({"full": page_size, "mamba": 1}),
                allocator_options(lazy_compaction, full_max_moves_per_call, zero_on_alloc=full_zero_on_alloc),
                allocator_options(
                    lazy_compaction, mamba_max_moves_per_call, zero_on_alloc=mamba_zero_on_alloc
                ),
            ),
            lazy_compaction,
            (("full", "full_kv_pool", page_size), ("mamba", "mamba_pool", 1)),
            kvcache,
            unified_buffer,
            device,
            need_sort,
            forward_stream,
        )
        self.full_attn_allocator.kernel_page_multiplier = full_kernel_page_multiplier
        # Allocations through the pair, which asks its eviction callback when short.
        self.full_attn_allocator._allocates = self._pair
        self.mamba_allocator._allocates = _PairStateSlots(self._pair)
        if eviction_callback is not None:
            self.set_eviction_callback(eviction_callback)

    # -- sizes (tokens) --
    @property
    def size(self) -> int:
        fa = self.full_attn_allocator
        return fa.schedulable_available_size() + fa.allocated_count()

    @size.setter
    def size(self, value) -> None:
        pass  # the base sets it; computed from the sides

    def available_size(self) -> int:
        return self.full_attn_allocator.schedulable_available_size()

    def full_available_size(self) -> int:
        return self.full_attn_allocator.schedulable_available_size()

    def mamba_slot_full_token_cost(self) -> int:
        """Full-token equivalents of gap one state slot takes (rounded up)."""
        return self._pair.sizes().state_slot_full_token_cost

    def state_slot_starved(self) -> bool:
        """The full side has room, but the gap is narrower than one state slot and no
        state hole is free: a state slot allocation returns None although memory is free."""
        return bool(self._pair.sizes().state_slot_starved)

    @property
    def size_full(self) -> int:
        return self.full_attn_allocator.max_slots - 1

    @property
    def size_mamba(self) -> int:
        return self.mamba_allocator.max_slots - 1

    def debug_print(self) -> str:
        return (
            f"#full-available={self.full_attn_allocator.available_size()}, "
            f"#mamba-available={self.mamba_allocator.available_size()}"
        )

    # -- full KV: the full side --
    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        return self.full_attn_allocator.alloc(need_size)

    def alloc_extend(
        self,
        prefix_lens,
        prefix_lens_cpu,
        seq_lens,
        seq_lens_cpu,
        last_loc,
        extend_num_tokens: int,
        num_new_pages: Optional[int] = None,
    ) -> Optional[torch.Tensor]:
        return self.full_attn_allocator.alloc_extend(
            prefix_lens,
            prefix_lens_cpu,
            seq_lens,
            seq_lens_cpu,
            last_loc,
            extend_num_tokens,
            num_new_pages=num_new_pages,
        )

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc) -> Optional[torch.Tensor]:
        return self.full_attn_allocator.alloc_decode(seq_lens, seq_lens_cpu, last_loc)

    def translate_kv_loc(
        self, loc: torch.Tensor, *, out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        return self.full_attn_allocator.translate_kv_loc(loc, out=out)

    @property
    def kernel_page_multiplier(self) -> int:
        return self.full_attn_allocator.kernel_page_multiplier

    @property
    def full_v2p_page_table(self) -> torch.Tensor:
        """The full side's page-granular virtual -> physical table (a live view): kernels that
        build an MLA block table from req_to_token gather a virtual page's physical page here
        and scale it by kernel_page_multiplier to reach its dense rows."""
        return self.full_attn_allocator.virtual_to_physical

    def translate_kv_loc_dense(
        self, loc: torch.Tensor, *, out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """Full-side virtual token ids -> dense ids (translate_kv_loc when the multiplier is 1)."""
        return self.full_attn_allocator.translate_kv_loc_dense(loc, out=out)

    # -- disaggregation (PD) transfers --
    def set_disagg_move_gate(self, gate) -> None:
        """Installs the PD move gate: a callable, True only when no transfer can be in flight.
        From then on translate_kv_indices_for_transfer protects what it hands out until the
        gate next reports True. Lazy compaction only, as in the reference."""
        transfer.check_gate(gate, self.lazy_compaction)
        self.full_attn_allocator.disagg_move_gate = gate
        self.mamba_allocator.disagg_move_gate = gate

    def translate_kv_indices_for_transfer(self, kv_indices: torch.Tensor) -> torch.Tensor:
        """Full-side virtual token ids -> physical token ids (int64; physical, not dense: the
        transfer engine addresses whole page envelopes). With a move gate installed, the pages
        of these tokens and every live state slot (the request's state envelope travels with
        its KV, and is addressed by the slot translate_mamba_indices gives) are first put
        under kvpool's move gate, both sides checked before either is gated, until the gate
        next reports no transfer in flight."""
        ids = kv_indices.to(torch.int64)
        gate = self.full_attn_allocator.disagg_move_gate
        return transfer.gated_translation(
            gate,
            lambda done: self._pair.gate_transfer(done, ids, self._live_state_slots()),
            self.full_attn_allocator.translate_kv_loc,
            ids,
        )

    def _live_state_slots(self) -> torch.Tensor:
        side = self.mamba_allocator
        v2p = side.virtual_to_physical.to("cpu")
        first = side.min_page_index
        return torch.nonzero(v2p[first:] >= 0).reshape(-1) + first

    def is_slot_allocated(self, slot: int) -> bool:
        return self.full_attn_allocator.is_slot_allocated(slot)

    def allocator_state_str(self) -> str:
        return self.full_attn_allocator.allocator_state_str()

    def free(self, free_index) -> None:
        if self._grouped(free_index):
            return
        self.full_attn_allocator.free(free_index)


class _PairStateSlots:
    """The Mamba pair's state-slot allocation where a side's alloc is expected."""

    def __init__(self, pair):
        self._pair = pair

    def alloc(self, need_size: int):
        return self._pair.alloc_state_slots(need_size)


class UnifiedMambaSlotAllocator:
    """The Mamba state side as a slot allocator: ``alloc`` returns virtual slot ids,
    ``translate`` maps them to physical slots (the state pool's indices)."""

    def __init__(self, mea: MultiEndedAllocator, max_size: int, device: str):
        self._multi_ended_allocator = mea
        self._max_size = max_size
        self._device = device

    def translate(self, virtual_ids: torch.Tensor) -> torch.Tensor:
        return self._multi_ended_allocator.translate_kv_loc(virtual_ids)

    @property
    def virtual_to_physical(self) -> torch.Tensor:
        return self._multi_ended_allocator.virtual_to_physical

    @property
    def size(self) -> int:
        return self._max_size

    def available_size(self) -> int:
        return self._max_size - self._multi_ended_allocator.allocated_count()

    def schedulable_available_size(self) -> int:
        return self._multi_ended_allocator.schedulable_available_size()

    def alloc(self, need_size: int):
        return self._multi_ended_allocator.alloc(need_size)

    def free(self, free_index) -> None:
        self._multi_ended_allocator.free(free_index)

    def clear(self) -> None:
        self._multi_ended_allocator.clear()

    def is_slot_allocated(self, slot) -> bool:
        return self._multi_ended_allocator.is_slot_allocated(int(slot))

    def state_digest(self) -> int:
        """The state side's (MultiEndedAllocator.state_digest)."""
        return self._multi_ended_allocator.state_digest()

    def allocator_state_str(self) -> str:
        return self._multi_ended_allocator.allocator_state_str()
