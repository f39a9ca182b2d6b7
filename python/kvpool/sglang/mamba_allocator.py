"""UnifiedMambaTokenToKVPoolAllocator: full KV ("full", paged) and Mamba state slots
("mamba", page size 1) in one unified buffer, each side owning its ids; and
UnifiedMambaSlotAllocator, the state side as a request table's slot allocator."""

from typing import Optional

import torch

from .. import native
from .._tensors import pool_device
from .base import BaseTokenToKVPoolAllocator, InflightForward
from .multi_ended_allocator import MultiEndedAllocator


class UnifiedMambaTokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
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
    ):
        super().__init__(
            unified_buffer.max_slots("full") - 1,
            page_size,
            unified_buffer.mha_spec("full").store_dtype,
            pool_device(device),
            kvcache,
            need_sort,
        )
        self.unified_buffer = unified_buffer
        self.lazy_compaction = lazy_compaction
        self._pair = native.MambaPair(unified_buffer._native, lazy_compaction)
        self._inflight = InflightForward()
        common = dict(
            unified_buffer=unified_buffer,
            device=device,
            need_sort=need_sort,
            forward_stream=forward_stream,
            inflight=self._inflight,
        )
        self.full_attn_allocator = MultiEndedAllocator._over(
            self._pair.full,
            kvcache=getattr(kvcache, "full_kv_pool", None),
            sub_pool_name="full",
            page_size=page_size,
            **common,
        )
        self.mamba_allocator = MultiEndedAllocator._over(
            self._pair.state,
            kvcache=getattr(kvcache, "mamba_pool", None),
            sub_pool_name="mamba",
            page_size=1,
            **common,
        )
        self.full_attn_allocator._peer = self.mamba_allocator
        self.mamba_allocator._peer = self.full_attn_allocator
        self.free_pages = torch.empty(0, dtype=torch.int64, device=self.device)
        self.release_pages = torch.empty(0, dtype=torch.int64, device=self.device)

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

    def is_slot_allocated(self, slot: int) -> bool:
        return self.full_attn_allocator.is_slot_allocated(slot)

    def allocator_state_str(self) -> str:
        return self.full_attn_allocator.allocator_state_str()

    def free(self, free_index) -> None:
        if self._grouped(free_index):
            return
        self.full_attn_allocator.free(free_index)

    # -- state --
    def backup_state(self):
        return [self.full_attn_allocator.backup_state(), self.mamba_allocator.backup_state()]

    def restore_state(self, state):
        assert len(state) == 2
        return self.full_attn_allocator.restore_state(
            state[0]
        ) + self.mamba_allocator.restore_state(state[1])

    def clear(self) -> None:
        self.full_attn_allocator.clear()
        self.mamba_allocator.clear()
        self.is_not_in_free_group = True
        self.free_group = []

    def check_invariants(self) -> None:
        self.full_attn_allocator.check_invariants()
        self.mamba_allocator.check_invariants()

    # -- lazy compaction hooks --
    def set_latest_forward_done_event(self, event) -> None:
        native.set_forward_done([self._pair.full, self._pair.state], event)

    def set_inflight_forward(
        self, forward_done, out_cache_loc_virtual: Optional[torch.Tensor]
    ) -> None:
        """The forward writes full KV at out_cache_loc; state slots are not written through it."""
        if not self.lazy_compaction:
            return
        self._inflight.set(
            [(self._pair.full, True), (self._pair.state, False)],
            forward_done,
            out_cache_loc_virtual,
        )

    def flush_opportunistic(self) -> int:
        if not self.lazy_compaction:
            return 0
        self._inflight.settle()
        return self._pair.full.flush(False) + self._pair.state.flush(False)


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

    def allocator_state_str(self) -> str:
        return self._multi_ended_allocator.allocator_state_str()
