"""Request tables with the reference's surface: requests are the engine's Req
objects (``req_pool_idx``, and for hybrid models ``mamba_pool_idx``,
``mamba_ping_pong_track_buffer``, ``mamba_next_track_idx``), the tables are live
tensors over kvpool's device tables (int64, where the reference's are int32)."""

from typing import List, Optional

import torch

from .. import native
from ..errors import InvalidArgumentError, InvalidStateError, NotAllocatedError
from .kv_pools import UnifiedMambaPool


def _require_reusable(reqs, reusing):
    for i in reusing:
        r = reqs[i]
        if not (
            getattr(r, "inflight_middle_chunks", 0) > 0 or getattr(r, "kv_committed_len", 0) > 0
        ):
            raise InvalidArgumentError("reusing request must be chunked or have committed KV")


class ReqToTokenPool:
    """Request slot -> its tokens' virtual ids; row 0 is the padding row."""

    def __init__(
        self, size: int, max_context_len: int, device: str, enable_memory_saver: bool = False
    ):
        self.size = size
        self._alloc_size = size + 1
        self.max_context_len = max_context_len
        self._table = native.ReqToTokenPool(size, max_context_len, device)
        self.device = self._table.device
        self.req_to_token = self._table.table
        self.req_generation = torch.zeros(self._alloc_size, dtype=torch.int64)

    def write(self, indices, values):
        if isinstance(values, torch.Tensor):
            values = values.to(self.req_to_token.dtype)
        self.req_to_token[indices] = values

    def available_size(self):
        return self._table.available_size()

    def alloc(self, reqs) -> Optional[List[int]]:
        reusing = [i for i, r in enumerate(reqs) if r.req_pool_idx is not None]
        _require_reusable(reqs, reusing)
        slots = self._table.alloc(len(reqs) - len(reusing))
        if slots is None:
            return None
        fresh = iter(slots)
        for r in reqs:
            if r.req_pool_idx is None:
                r.req_pool_idx = next(fresh)
                self.req_generation[r.req_pool_idx] = self._table.generation(r.req_pool_idx)
        return [r.req_pool_idx for r in reqs]

    def free(self, req):
        if req.req_pool_idx is None:
            raise NotAllocatedError("request must have req_pool_idx")
        self._table.free([req.req_pool_idx])
        req.req_pool_idx = None

    def clear(self):
        self._table.clear()
        self.req_generation.zero_()

    def check_invariants(self):
        self._table.check_invariants()


class HybridReqToTokenPool:
    """ReqToTokenPool plus, per request, a Mamba state slot (and with the extra buffer
    its ping-pong track slots) from kvpool's state side.

    The state side comes from ``mamba_allocator`` (a UnifiedMambaSlotAllocator or the
    Mamba pair's ``mamba_allocator``), given here or assigned later as the
    reference's factory does; the tables exist from then on. With
    ``unified_buffer``, ``mamba_pool`` views its Mamba sub-pool.
    """

    def __init__(
        self,
        *,
        size: int,
        max_context_len: int,
        device: str,
        enable_mamba_extra_buffer: bool = False,
        enable_mamba_extra_buffer_lazy: bool = False,
        enable_overlap_schedule: bool = True,
        mamba_size: Optional[int] = None,
        mamba_spec_state_size: Optional[int] = None,
        enable_memory_saver: bool = False,
        cache_params=None,
        mamba_layer_ids: Optional[List[int]] = None,
        speculative_num_draft_tokens: Optional[int] = None,
        speculative_eagle_topk: Optional[int] = None,
        start_layer: Optional[int] = None,
        unified_buffer=None,
        mamba_sub_pool_name: str = "mamba",
        mamba_allocator=None,
        pre_alloc_size: int = 0,
        **_unused,
    ):
        if pre_alloc_size < 0:
            raise InvalidArgumentError(f"pre_alloc_size must be >= 0, got {pre_alloc_size}")
        # A disaggregated decode node's rows cover its preallocated requests too, while size
        # stays the running-request cap the scheduler checks against.
        self.size = size
        self.pre_alloc_size = pre_alloc_size
        self._rows = size + pre_alloc_size
        self._alloc_size = self._rows + 1
        self.max_context_len = max_context_len
        self.device = device
        self.enable_mamba_extra_buffer = enable_mamba_extra_buffer
        self.enable_mamba_extra_buffer_lazy = enable_mamba_extra_buffer_lazy
        self.mamba_ping_pong_track_buffer_size = 2 if enable_overlap_schedule else 1
        self.start_layer = start_layer or 0
        self.mamba_map = {layer_id: i for i, layer_id in enumerate(mamba_layer_ids or [])}
        self.mamba_pool = (
            UnifiedMambaPool(unified_buffer=unified_buffer, sub_pool_name=mamba_sub_pool_name)
            if unified_buffer is not None
            else None
        )
        self.req_generation = torch.zeros(self._alloc_size, dtype=torch.int64)
        self._table = None
        self._mamba_allocator = None
        if mamba_allocator is not None:
            self.mamba_allocator = mamba_allocator

    # -- the state side, and the tables made with it --
    @property
    def mamba_allocator(self):
        return self._mamba_allocator

    @mamba_allocator.setter
    def mamba_allocator(self, allocator):
        mea = getattr(allocator, "_multi_ended_allocator", allocator)
        side = getattr(mea, "_side", None)
        if not isinstance(side, native.MultiEndedAllocator):
            raise InvalidArgumentError(
                "HybridReqToTokenPool takes its state slots from a kvpool allocator (the Mamba pair's "
                f"mamba_allocator or a UnifiedMambaSlotAllocator over it), not {type(allocator).__name__}"
            )
        if self._table is not None:
            raise InvalidStateError("HybridReqToTokenPool: the state allocator is already set")
        self._table = native.HybridReqToTokenPool(
            self._rows,
            self.max_context_len,
            side,
            self.enable_mamba_extra_buffer,
            self.enable_mamba_extra_buffer_lazy,
            self.mamba_ping_pong_track_buffer_size,
        )
        self._mamba_allocator = allocator
        self._state_side = mea

    def _tables(self):
        if self._table is None:
            raise InvalidStateError(
                "HybridReqToTokenPool: set mamba_allocator first (its state slots)"
            )
        return self._table

    @property
    def req_to_token(self) -> torch.Tensor:
        return self._tables().table

    @property
    def req_index_to_mamba_index_mapping(self) -> torch.Tensor:
        return self._tables().mamba_map

    @property
    def req_index_to_mamba_ping_pong_track_buffer_mapping(self) -> torch.Tensor:
        return self._tables().track_map

    def write(self, indices, values):
        if isinstance(values, torch.Tensor):
            values = values.to(torch.int64)
        self.req_to_token[indices] = values

    def available_size(self):
        return self._tables().available_size()

    # -- requests --
    def alloc(self, reqs) -> Optional[List[int]]:
        table = self._tables()
        reusing = [i for i, r in enumerate(reqs) if r.req_pool_idx is not None]
        _require_reusable(reqs, reusing)
        for i in reusing:
            if reqs[i].mamba_pool_idx is None:
                raise InvalidStateError(
                    f"request slot {reqs[i].req_pool_idx} is reused without its Mamba state: kvpool keeps a "
                    "request's state slot with its request slot until free_mamba_cache"
                )
        new = [r for r in reqs if r.req_pool_idx is None]
        held = [-1 if r.mamba_pool_idx is None else int(r.mamba_pool_idx) for r in new]
        slots = table.alloc(held)
        if slots is None:
            return None
        for r, slot, adopted in zip(new, slots, held):
            r.req_pool_idx = slot
            r.mamba_pool_idx = table.mamba_map[slot].clone()
            if adopted < 0:
                r.mamba_needs_clear = True
            if self.enable_mamba_extra_buffer:
                r.mamba_ping_pong_track_buffer = table.track_map[slot].clone()
                r.mamba_next_track_idx = 0
            self.req_generation[slot] = table.generation(slot)
        return [r.req_pool_idx for r in reqs]

    def free(self, req):
        if req.req_pool_idx is None:
            raise NotAllocatedError("request must have req_pool_idx")
        self._tables().free([req.req_pool_idx])
        req.req_pool_idx = None

    def free_mamba_cache(self, req, mamba_ping_pong_track_buffer_to_keep: Optional[int] = None):
        if req.mamba_pool_idx is None:
            raise NotAllocatedError("double free? mamba_index is None")
        self._tables().free_mamba_cache(req.req_pool_idx, mamba_ping_pong_track_buffer_to_keep)
        req.mamba_pool_idx = None
        if self.enable_mamba_extra_buffer:
            req.mamba_ping_pong_track_buffer = None
            req.mamba_next_track_idx = None

    def get_mamba_indices(self, req_indices: torch.Tensor) -> torch.Tensor:
        return self.req_index_to_mamba_index_mapping[req_indices]

    def translate_mamba_indices(self, mamba_indices: torch.Tensor) -> torch.Tensor:
        """Virtual Mamba slot ids -> physical slots (the state pool's indices), int32."""
        return self._state_side.translate_kv_loc(mamba_indices).to(torch.int32)

    def mamba2_layer_cache(self, layer_id: int):
        return self.mamba_pool.mamba2_layer_cache(self.mamba_map[layer_id])

    # -- ping-pong track slots --
    def get_mamba_ping_pong_other_idx(self, mamba_next_track_idx: int) -> int:
        if self.mamba_ping_pong_track_buffer_size == 2:
            return 1 - mamba_next_track_idx
        return mamba_next_track_idx

    def get_mamba_ping_pong_keep_idx(self, req) -> int:
        if self.enable_mamba_extra_buffer_lazy:
            return req.mamba_next_track_idx
        return self.get_mamba_ping_pong_other_idx(req.mamba_next_track_idx)

    def set_mamba_ping_pong_slot(self, req, idx: int, value):
        """Puts state slot `value` at track index idx; the slot that was there passes to the caller."""
        self._tables().set_track_slot(req.req_pool_idx, idx, int(value))
        req.mamba_ping_pong_track_buffer[idx] = value

    def donate_mamba_ping_pong_slot(self, req, new_slot: torch.Tensor) -> torch.Tensor:
        """Hands the slot with the latest tracked state to the caller (shape [1]) and
        puts new_slot[0] in its place."""
        table = self._tables()
        table.set_next_track_idx(req.req_pool_idx, req.mamba_next_track_idx)
        idx = self.get_mamba_ping_pong_keep_idx(req)
        donated = req.mamba_ping_pong_track_buffer[idx].unsqueeze(-1).clone()
        table.donate_track_slot(req.req_pool_idx, int(new_slot[0]))
        req.mamba_ping_pong_track_buffer[idx] = new_slot[0]
        return donated

    def alloc_mamba_ping_pong_slot(self, req, idx: int) -> bool:
        """Lazy extra buffer: a fresh state slot at the empty track index idx; False when none is free."""
        table = self._tables()
        if not table.alloc_track_slot(req.req_pool_idx, idx):
            return False
        req.mamba_ping_pong_track_buffer = table.track_map[req.req_pool_idx].clone()
        return True

    def clear(self):
        self._tables().clear()
        self.req_generation.zero_()

    def check_invariants(self):
        self._tables().check_invariants()


UnifiedHybridReqToTokenPool = HybridReqToTokenPool
