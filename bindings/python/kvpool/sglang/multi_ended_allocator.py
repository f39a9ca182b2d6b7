"""MultiEndedAllocator: one sub-pool of a UnifiedKVPool, SGLang's surface over kvpool's side.

Token-granular ids in and out; ``virtual_to_physical`` / ``physical_to_virtual``
are page-granular live views of kvpool's device tables (int64, -1 unbound,
row 0 the padding anchor, a trailing -1 row). ``free`` takes the ids on the
host: a CUDA tensor is copied there once (the reference syncs there too), a
CPU tensor or a list is read in place.
"""

import os
from typing import Optional

import torch

from .. import _lib, native
from .._tensors import pool_device
from ..errors import InvalidArgumentError, KVPoolAssertionError, WrongRoleError
from . import relocation, transfer
from .base import BaseTokenToKVPoolAllocator, InflightForward


def allocator_options(lazy_compaction, max_moves_per_call=None, is_id_owner=True, zero_on_alloc=False):
    """A side's kvpool options. The opportunistic flush's move cap is max_moves_per_call, or
    what SGLANG_LAZY_COMPACTION_MAX_MOVES_PER_CALL says when the side is made, as in the reference.
    zero_on_alloc (not in the reference, off as there): the pages the side hands out are zeroed.
    """
    if max_moves_per_call is None:
        max_moves_per_call = int(
            os.environ.get("SGLANG_LAZY_COMPACTION_MAX_MOVES_PER_CALL", "4096")
        )
    if max_moves_per_call <= 0:
        raise InvalidArgumentError(f"max_moves_per_call must be positive, not {max_moves_per_call}")
    return native.allocator_options(lazy_compaction, max_moves_per_call, is_id_owner, zero_on_alloc)


class MultiEndedAllocator(BaseTokenToKVPoolAllocator):
    def __init__(
        self,
        *,
        kvcache,
        unified_buffer,
        sub_pool_name: str,
        device: str,
        is_id_owner: bool,
        page_size: int = 1,
        need_sort: bool = False,
        forward_stream: Optional[torch.cuda.Stream] = None,
        lazy_compaction: bool = False,
        max_moves_per_call: Optional[int] = None,
        kernel_page_multiplier: int = 1,
        zero_on_alloc: bool = False,
    ):
        _check_multiplier(kernel_page_multiplier)
        # The allocator's page size decides (the pool's shapes its views): the first
        # allocator over the buffer fixes kvpool's layout with it.
        buffer = unified_buffer._native_for({sub_pool_name: page_size})
        side = native.MultiEndedAllocator.create(
            buffer,
            sub_pool_name,
            allocator_options(lazy_compaction, max_moves_per_call, is_id_owner, zero_on_alloc),
        )
        self._setup(
            side,
            kvcache=kvcache,
            unified_buffer=unified_buffer,
            sub_pool_name=sub_pool_name,
            device=device,
            need_sort=need_sort,
            forward_stream=forward_stream,
            inflight=InflightForward(),
        )
        unified_buffer._fix_layout(buffer)
        self.kernel_page_multiplier = kernel_page_multiplier

    @classmethod
    def _over(cls, side, *, page_size, **setup):
        """The allocator of a pair's side (the pair made the side); setup: _setup's keywords."""
        if side.info.page_size != page_size:
            raise InvalidArgumentError(
                f"sub-pool {setup['sub_pool_name']!r}: the pair's side has page size "
                f"{side.info.page_size}, the allocator asks for {page_size}"
            )
        self = cls.__new__(cls)
        self._setup(side, **setup)
        return self

    def _setup(
        self,
        side,
        *,
        kvcache,
        unified_buffer,
        sub_pool_name,
        device,
        need_sort,
        forward_stream,
        inflight,
    ):
        spec = unified_buffer.spec(sub_pool_name)
        info = side.info
        max_slots = unified_buffer.max_slots(sub_pool_name)
        if pool_device(device) != side.device:
            raise InvalidArgumentError(
                f"device {device!r} is not the unified buffer's, {side.device}"
            )
        super().__init__(
            max_slots, info.page_size, spec.get_dtype(), side.device, kvcache, need_sort
        )
        self._side = side
        # Where alloc, alloc_extend and alloc_decode go: the side, or the Mamba pair
        # (whose calls ask its eviction callback).
        self._allocates = side
        self._inflight = inflight
        self.unified_buffer = unified_buffer
        self.sub_pool_name = sub_pool_name
        self.spec = spec
        self.max_slots = max_slots
        self.grow_direction = _lib.GROW_NAMES[info.grow]
        self.entry_bytes = info.entry_bytes
        self.min_slot_index = unified_buffer.min_slot_index(sub_pool_name, side.buffer)
        self.is_id_owner = bool(info.is_id_owner)
        self.forward_stream = forward_stream
        self.num_pages = info.num_physical_pages
        self.min_page_index = info.min_page_index
        self.entry_bytes_per_page = info.page_bytes
        self.lazy_compaction = bool(info.lazy)
        self._lazy_max_moves_per_call = info.max_moves_per_flush
        self.zero_on_alloc = bool(info.zero_on_alloc)
        self._peer = None
        self._kernel_page_multiplier = 1
        # While set (the composite's set_disagg_move_gate), translations for a transfer gate
        # the pages they name until it reports no transfer in flight.
        self.disagg_move_gate = None
        self.relocation = relocation.install(
            side, kvcache, unified_buffer, sub_pool_name, info.page_size, side.device
        )

    # -- peers --
    def bind_peer(self, peer: "MultiEndedAllocator") -> None:
        """Binds both sides (kvpool's sides share the gap natively); the reference's pairing
        calls it on each side, and the second call, with the same peer, changes nothing.
        Binding to another peer is refused."""
        self._side.bind_peer(peer._side)
        self._peer = peer
        peer._peer = self

    @property
    def peer(self):
        return self._peer

    # -- live views and sizes --
    @property
    def virtual_to_physical(self) -> torch.Tensor:
        return self._side.tables()[0]

    @property
    def physical_to_virtual(self) -> torch.Tensor:
        return self._side.tables()[1]

    @property
    def num_virtual_ids(self) -> int:
        """The virtual page ids the v2p rows span, the trailing -1 row apart, as in the
        reference (num_pages + 1 rows, num_virtual_ids = num_pages). A non-owner (the SWA
        side) binds its owner's ids, so its table spans the owner's id space once bound:
        walks of v2p[1:num_virtual_ids] stay in the table whatever the sides' entry sizes."""
        return int(self.virtual_to_physical.shape[0]) - 1

    @property
    def free_virtual_ids(self) -> Optional[torch.Tensor]:
        """The free virtual page ids in the order allocations take them (a copy), None on a non-owner."""
        if not self.is_id_owner:
            return None
        return self._side.free_virtual_pages().to(self.device)

    @property
    def watermark_physical(self) -> int:
        return self._side.state().watermark

    @property
    def live_page_count(self) -> int:
        return self._side.state().live_pages

    def available_size(self) -> int:
        return self._side.state().available_size

    def schedulable_available_size(self) -> int:
        return self._side.state().schedulable_available_size

    def allocated_count(self) -> int:
        return self._side.state().allocated_count

    def _allocated_pages(self) -> int:
        s = self._side.state()
        return s.live_pages + s.hole_pages + s.pending_reuse_pages

    def is_slot_allocated(self, slot: int) -> bool:
        return self._side.is_slot_allocated(slot)

    def _native_digests(self):
        return (self._side.state_digest(),)

    def allocator_state_str(self) -> str:
        return self._side.state_string()

    def debug_print(self) -> str:
        return f"#available={self.available_size()}"

    def counters(self):
        """kvpool's cumulative counters of this side (allocations, frees, moves, flushes)."""
        return self._side.counters()

    def check_invariants(self) -> None:
        """Host state and device tables checked against each other (synchronises the stream)."""
        self._side.check_invariants()

    # -- allocation --
    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        self._inflight.settle()
        if not self.is_id_owner:
            raise WrongRoleError(
                f"MultiEndedAllocator({self.sub_pool_name!r}).alloc called on a non-id-owner allocator; "
                "use alloc_with_virtual instead"
            )
        if need_size <= 0:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        return self._allocates.alloc(need_size)

    def alloc_with_virtual(self, virtual_pages: torch.Tensor) -> None:
        """Binds peer-minted virtual PAGE ids on this (non-owner) side."""
        self._inflight.settle()
        if virtual_pages.numel() == 0:
            return
        if not self._side.alloc_with_virtual(virtual_pages):
            raise KVPoolAssertionError(
                f"MultiEndedAllocator({self.sub_pool_name!r}).alloc_with_virtual: out of physical room "
                f"(nothing was bound). {self.allocator_state_str()}"
            )

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
        self._inflight.settle()
        return self._allocates.alloc_extend(
            prefix_lens_cpu, seq_lens_cpu, last_loc, extend_num_tokens
        )

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc) -> Optional[torch.Tensor]:
        self._inflight.settle()
        return self._allocates.alloc_decode(seq_lens_cpu, last_loc)

    # -- translate --
    def translate_kv_loc(
        self, virt_tokens: torch.Tensor, *, out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """Virtual token ids -> physical token ids; tombstones and -1 clamp to the sink (0).
        ``out=`` (int64, same shape) is written in place and returned, and may be virt_tokens."""
        return self._side.translate_into(virt_tokens, out, torch.int64, "translate_kv_loc")

    @property
    def kernel_page_multiplier(self) -> int:
        """Scale of the dense (kernel-facing) id space: a page's rows per layer times this is
        its run of dense rows (layer_num for an MLA sub-pool read through dense views)."""
        return self._kernel_page_multiplier

    @kernel_page_multiplier.setter
    def kernel_page_multiplier(self, value: int) -> None:
        _check_multiplier(value)
        self._kernel_page_multiplier = int(value)

    def translate_kv_loc_dense(
        self, virt_tokens: torch.Tensor, *, out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """Virtual token ids -> dense ids, ``(t // ps) * (ps * kernel_page_multiplier) + t % ps``
        of the physical token t: rows of an MLA sub-pool's dense views. Tombstones and -1
        clamp to 0 (page 0, the padding sink, in every layer's view); ``out=`` as in
        translate_kv_loc. With kernel_page_multiplier 1 it is translate_kv_loc. Compaction and
        the in-flight write sets keep using physical ids: dense ids are for kernels only."""
        if self._kernel_page_multiplier == 1:
            return self.translate_kv_loc(virt_tokens, out=out)
        return self._side.translate_into(
            virt_tokens, out, torch.int64, "translate_kv_loc_dense", self._kernel_page_multiplier
        )

    def translate_kv_indices_for_transfer(self, kv_indices: torch.Tensor) -> torch.Tensor:
        """Virtual token ids -> physical token ids (int64) for a transfer engine, which
        addresses whole pages (get_contiguous_buf_infos). With a disagg_move_gate set, the
        pages holding these tokens are first put under kvpool's move gate: no compaction
        moves or overwrites them until the gate next reports no transfer in flight."""
        ids = kv_indices.to(torch.int64)
        return transfer.gated_translation(
            self.disagg_move_gate,
            lambda done: self._side.gate_transfer(done, ids),
            self.translate_kv_loc,
            ids,
        )

    def describe_transfer(self, kv_indices, layout, marker=None):
        """kvpool's addition: this sub-pool's side of a PD transfer (kvpool.transfer's
        describe_transfer over this allocator's side): the byte runs of these virtual tokens
        (host ids, in transfer order) under ``layout`` (the KV pool's transfer_layout()),
        their pages gated until ``marker`` reports done. Bad ids raise, gating nothing."""
        return native.describe_transfer(self._side, layout, kv_indices, marker)

    # -- free and compaction --
    def free(self, free_index) -> None:
        if self._grouped(free_index):
            return
        self._side.free(free_index)

    def _flush(self, *, urgent: bool) -> int:
        self._inflight.settle()
        return self._side.flush(urgent)

    def flush_opportunistic(self) -> int:
        if not self.lazy_compaction:
            return 0
        return self._flush(urgent=False)

    def maybe_drain_pending_reuse(self) -> None:
        self._side.drain_pending_reuse()

    def set_latest_forward_done_event(self, event) -> None:
        native.set_forward_done([self._side], event)

    def set_inflight_forward(
        self, forward_done, out_cache_loc_virtual: Optional[torch.Tensor]
    ) -> None:
        if not self.lazy_compaction:
            return
        self._inflight.set([(self._side, True)], forward_done, out_cache_loc_virtual)

    # -- state --
    def backup_state(self):
        return self._side.backup_state()

    def restore_state(self, state):
        """Undoes every allocation since backup_state(); returns the relocations
        recorded in the window (none: kvpool refuses frees inside it)."""
        self._inflight.settle()
        self._side.restore_state(state)
        return []

    def commit_state(self, state):
        """Keeps the allocations since backup_state() and closes the window (kvpool's addition:
        the reference has no window to close)."""
        self._side.commit_state(state)

    def clear_inverse_history(self) -> None:
        """kvpool keeps no relocation history (restore_state undoes allocations itself)."""

    def clear(self) -> None:
        self._inflight.settle()
        self._side.clear()
        self.is_not_in_free_group = True
        self.free_group = []


def _check_multiplier(value):
    if not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"kernel_page_multiplier must be an int >= 1, got {value!r}")
