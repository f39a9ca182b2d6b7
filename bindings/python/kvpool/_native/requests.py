"""kvpool.native's request tables: ReqToTokenPool and HybridReqToTokenPool."""

from ctypes import byref, c_int, c_int64, c_void_p

import torch

from .. import _lib
from .._lib import check, lib
from .._tensors import device_code, host_ids, pool_device, stream_getter
from .handle import _Handle, _new


class ReqToTokenPool(_Handle):
    """A request table: rows 1..size for requests, row 0 the padding row; ``table`` is the live tensor."""

    _destroy = lib.kvpool_req_to_token_pool_destroy

    def __init__(self, size, max_context_len, device):
        self.device = pool_device(device)
        self._stream = stream_getter(self.device)
        super().__init__(
            _new(
                lib.kvpool_req_to_token_pool_create_on,
                device_code(self.device),
                int(size),
                int(max_context_len),
                self._stream(),
            )
        )
        table, rows, columns = c_void_p(), c_int64(), c_int64()
        check(lib.kvpool_req_to_token_pool_table(self._h, byref(table), byref(rows), byref(columns)))
        self._table = (table.value, (rows.value, columns.value))
        self._ok = c_int()

    @property
    def table(self):
        return self._exported("table", *self._table, torch.int64)

    def available_size(self):
        n = c_int64()
        check(lib.kvpool_req_to_token_pool_available(self._h, byref(n)))
        return n.value

    def generation(self, slot):
        n = c_int64()
        check(lib.kvpool_req_to_token_pool_generation(self._h, int(slot), byref(n)))
        return n.value

    def alloc(self, n):
        slots = (c_int64 * max(n, 1))()
        check(lib.kvpool_req_to_token_pool_alloc(self._h, int(n), slots, byref(self._ok)))
        return list(slots[:n]) if self._ok.value else None

    def free(self, slots):
        ids = host_ids(slots, "slots")
        check(lib.kvpool_req_to_token_pool_free(self._h, ids.ptr, ids.n))

    def clear(self):
        check(lib.kvpool_req_to_token_pool_clear(self._h))

    def check_invariants(self):
        check(lib.kvpool_req_to_token_pool_check_invariants(self._h, self._stream()))


class HybridReqToTokenPool(_Handle):
    """A hybrid model's request table: + request -> Mamba state slot (+ ping-pong
    track slots), state slots taken from ``states`` (a page-size-1 MultiEndedAllocator)."""

    _destroy = lib.kvpool_hybrid_req_to_token_pool_destroy

    def __init__(
        self,
        size,
        max_context_len,
        states,
        extra_buffer=False,
        extra_buffer_lazy=False,
        track_size=2,
    ):
        self.device = states.device
        self._stream = stream_getter(self.device)
        self.states = states
        options = _lib.HybridReqToTokenPoolOptions(
            1 if extra_buffer else 0, 1 if extra_buffer_lazy else 0, int(track_size)
        )
        super().__init__(
            _new(
                lib.kvpool_hybrid_req_to_token_pool_create,
                int(size),
                int(max_context_len),
                states._h,
                byref(options),
                self._stream(),
            )
        )
        table, rows, columns, mamba, track, track_columns = (
            c_void_p(),
            c_int64(),
            c_int64(),
            c_void_p(),
            c_void_p(),
            c_int64(),
        )
        check(
            lib.kvpool_hybrid_req_to_token_pool_tables(
                self._h,
                byref(table),
                byref(rows),
                byref(columns),
                byref(mamba),
                byref(track),
                byref(track_columns),
            )
        )
        self.track_columns = track_columns.value
        self._tables = {
            "table": (table.value, (rows.value, columns.value)),
            "mamba_map": (mamba.value, (rows.value,)),
            "track_map": (track.value, (rows.value, self.track_columns)),
        }
        self._ok = c_int()
        self._n = c_int64()

    def _table(self, key):
        return self._exported(key, *self._tables[key], torch.int64)

    @property
    def table(self):
        return self._table("table")

    @property
    def mamba_map(self):
        """Request slot -> its Mamba state slot."""
        return self._table("mamba_map")

    @property
    def track_map(self):
        """Request slot -> its ping-pong track slots (-1: none)."""
        return self._table("track_map")

    def available_size(self):
        check(lib.kvpool_hybrid_req_to_token_pool_available(self._h, byref(self._n)))
        return self._n.value

    def generation(self, slot):
        check(lib.kvpool_hybrid_req_to_token_pool_generation(self._h, int(slot), byref(self._n)))
        return self._n.value

    def alloc(self, mamba_slots):
        """One request per entry: a state slot to hand over, or -1 for a fresh one. Slots or None."""
        ids = host_ids(mamba_slots, "mamba_slots")
        slots = (c_int64 * max(ids.n, 1))()
        check(
            lib.kvpool_hybrid_req_to_token_pool_alloc(
                self._h, self._stream(), ids.ptr, ids.n, slots, byref(self._ok)
            )
        )
        return list(slots[: ids.n]) if self._ok.value else None

    def free(self, slots):
        ids = host_ids(slots, "slots")
        check(lib.kvpool_hybrid_req_to_token_pool_free(self._h, ids.ptr, ids.n))

    def free_mamba_cache(self, req, keep_idx=None):
        check(
            lib.kvpool_hybrid_req_to_token_pool_free_mamba_cache(
                self._h,
                self._stream(),
                int(req),
                -1 if keep_idx is None else int(keep_idx),
                byref(self._n),
            )
        )
        return self._n.value

    def request(self, req):
        """(Mamba slot, [track slots], next track index) of a request slot; -1 where none."""
        mamba, nxt = c_int64(), c_int64()
        tracks = (c_int64 * max(self.track_columns, 1))()
        check(
            lib.kvpool_hybrid_req_to_token_pool_request(self._h, int(req), byref(mamba), tracks, byref(nxt))
        )
        return mamba.value, list(tracks[: self.track_columns]), nxt.value

    def set_next_track_idx(self, req, idx):
        check(lib.kvpool_hybrid_req_to_token_pool_set_next_track_idx(self._h, int(req), int(idx)))

    def set_track_slot(self, req, idx, value):
        check(
            lib.kvpool_hybrid_req_to_token_pool_set_track_slot(
                self._h, self._stream(), int(req), int(idx), int(value), byref(self._n)
            )
        )
        return self._n.value

    def donate_track_slot(self, req, new_slot):
        check(
            lib.kvpool_hybrid_req_to_token_pool_donate_track_slot(
                self._h, self._stream(), int(req), int(new_slot), byref(self._n)
            )
        )
        return self._n.value

    def alloc_track_slot(self, req, idx):
        check(
            lib.kvpool_hybrid_req_to_token_pool_alloc_track_slot(
                self._h, self._stream(), int(req), int(idx), byref(self._ok)
            )
        )
        return bool(self._ok.value)

    def clear(self):
        check(lib.kvpool_hybrid_req_to_token_pool_clear(self._h, self._stream()))

    def check_invariants(self):
        check(lib.kvpool_hybrid_req_to_token_pool_check_invariants(self._h, self._stream()))
