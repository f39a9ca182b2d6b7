"""kvpool.native's composites: UnifiedSWAAllocator, UnifiedMambaAllocator and
UnifiedMambaSWAAllocator, the sides of one buffer kvpool makes and keeps together."""

from collections import namedtuple
from ctypes import byref, c_int64

from .. import _lib
from .._lib import check, lib, raise_status
from .._tensors import host_ids, stream_getter
from .._tokens import token_handle
from .allocator import MultiEndedAllocator
from .handle import _INT64, _TENSOR, _Handle, _host_run, _new
from .kv import _KV, _MambaSWASnapshot, _PairSnapshot


# The short calls' C functions, bound once (kv.py's).
_free = lib.kvpool_kv_free
_flush = lib.kvpool_kv_flush

EvictionShortfall = namedtuple("EvictionShortfall", "side pages bytes requested_pages")
EvictionShortfall.__doc__ = """What an allocation lacks when it calls the eviction callback: side (the short
sub-pool's name), pages (of that side, at least 1), bytes (what freeing them opens, at the
allocation's cost per page: an estimate), requested_pages (what it asks of that side)."""


class _Pair(_KV, _Handle):
    """Sides of one buffer made and kept together by kvpool (a pair, or the tri-pool's
    three): ``sides``, in the order of ``names``."""

    _create = None
    _snapshot = _PairSnapshot

    def __init__(self, buffer, options, names):
        """options: each side's allocator_options(...); names: each side's sub-pool."""
        cls = type(self)
        super().__init__(
            _new(
                cls._create,
                buffer._h,
                *(name.encode() for name in names),
                *(byref(o) for o in options),
            )
        )
        self.buffer = buffer
        self.device = buffer.device
        self._stream = stream_getter(self.device)
        self._init_kv()
        self._moved = c_int64()
        self._moved_ref = byref(self._moved)
        self.sides = tuple(
            MultiEndedAllocator(_new(lib.kvpool_kv_side, self._kv, which), buffer) for which in range(len(names))
        )

    def sizes(self):
        status = type(self)._sizes_of(self._h, byref(self._sizes))
        if status:
            raise_status(status)
        return self._sizes

    # ---------------------------------------------------------------- eviction
    def set_eviction_callback(self, evict):
        """evict(shortfall) -> the bytes it freed (any positive number when unknown; 0,
        False or None: it can free nothing more), called with an EvictionShortfall when an
        allocation of this composite falls short, before it fails; the allocation is then
        tried again, until it succeeds or evict frees nothing. evict frees through this
        object's free calls (any side); allocating or installing a callback from inside it
        raises InvalidStateError, and an exception it raises is re-raised by the
        allocation. None removes it."""
        if evict is None:
            check(lib.kvpool_kv_set_eviction_callback(self._kv, _lib.EVICT_FN(), None))
            self._evict = None
            return

        def on_shortfall(_user, shortfall):
            s = shortfall.contents
            try:
                freed = evict(
                    EvictionShortfall(s.side.decode(), s.pages, s.bytes, s.requested_pages)
                )
                return max(int(freed or 0), 0)
            except BaseException as e:  # re-raised when the C call returns
                _lib.note_callback_exception(e)
                return -1

        fn = _lib.EVICT_FN(on_shortfall)
        check(lib.kvpool_kv_set_eviction_callback(self._kv, fn, None))
        self._evict = fn  # kept alive while installed

    # ---------------------------------------------------------------- free and compaction
    def free(self, virtual_tokens):
        """Every KV side (the SWA pair's and the tri-pool's sliding-window pages already
        released by free_swa are skipped; the Mamba pair's full side)."""
        ids = virtual_tokens
        if type(ids) is _TENSOR and ids.is_cpu and ids.dtype is _INT64 and ids.is_contiguous():
            ptr, n = ids.data_ptr(), ids.numel()
        else:
            ids, ptr, n = _host_run(ids, "free_index")
        status = _free(self._kv, self._stream(), ptr, n)
        if status:
            raise_status(status)

    def free_swa(self, virtual_tokens):
        """Tokens that left the window: the sliding-window side only."""
        ids = host_ids(virtual_tokens, "free_index")
        check(lib.kvpool_kv_free_swa(self._kv, self._stream(), ids.ptr, ids.n))

    def flush_opportunistic(self):
        """One opportunistic lazy compaction pass over every side; pages moved."""
        status = _flush(self._kv, self._stream(), self._moved_ref)
        if status:
            raise_status(status)
        return self._moved.value

    # ---------------------------------------------------------------- state slots
    def alloc_state_slots(self, count):
        """count state slot ids (device int64), or None when there is no room."""
        out = self._no_ids.new_empty(max(int(count), 0))
        check(
            lib.kvpool_kv_alloc_state_slots(
                self._kv, self._stream(), int(count), out.data_ptr(), self._ok_ref
            )
        )
        return out if self._ok.value else None

    # ---------------------------------------------------------------- the forward's hooks
    def set_latest_forward_done(self, marker):
        """The engine's latest forward-done marker (an object with query(), or a recorded
        torch.cuda.Event; None: no forward in flight), on every side."""
        _token, handle = token_handle(marker)
        check(lib.kvpool_kv_set_latest_forward_done(self._kv, handle))

    def set_inflight_forward(self, marker, virtual_tokens):
        """The forward in flight until marker is done writes these virtual tokens on every
        KV side (host ids)."""
        _token, handle = token_handle(marker)
        ids = host_ids(virtual_tokens if virtual_tokens is not None else (), "out_cache_loc")
        check(lib.kvpool_kv_set_inflight_forward(self._kv, handle, ids.ptr, ids.n))


class UnifiedSWAAllocator(_Pair):
    """The SWA pair: ``full`` mints the virtual ids, ``swa`` binds them; both or neither."""

    _destroy = lib.kvpool_unified_swa_allocator_destroy
    _create = lib.kvpool_unified_swa_allocator_create
    _as_kv = lib.kvpool_unified_swa_allocator_kv
    _sizes_of = lib.kvpool_unified_swa_allocator_sizes

    def __init__(self, buffer, full_options, swa_options, full_name="full", swa_name="swa"):
        super().__init__(buffer, (full_options, swa_options), (full_name, swa_name))
        self.full, self.swa = self.sides
        self._sizes = _lib.SWASizes()


class UnifiedMambaAllocator(_Pair):
    """The Mamba pair: ``full`` KV (paged) and ``state`` slots (page size 1), own ids each.
    Its alloc, alloc_extend, alloc_decode (the full side's) and alloc_state_slots ask the
    eviction callback when short; the sides' own calls do not."""

    _destroy = lib.kvpool_unified_mamba_allocator_destroy
    _create = lib.kvpool_unified_mamba_allocator_create
    _as_kv = lib.kvpool_unified_mamba_allocator_kv
    _sizes_of = lib.kvpool_unified_mamba_allocator_sizes

    def __init__(self, buffer, full_options, state_options, full_name="full", state_name="mamba"):
        super().__init__(buffer, (full_options, state_options), (full_name, state_name))
        self.full, self.state = self.sides
        self._sizes = _lib.MambaSizes()


class UnifiedMambaSWAAllocator(_Pair):
    """The tri-pool: ``state`` slots (up, page size 1), ``swa`` sliding-window KV
    (floating) and ``full`` KV (down) in one buffer. ``full`` mints the token ids and
    ``swa`` binds them (both or neither); state slots own theirs. Each side's translate,
    tables and state are its MultiEndedAllocator's; state slots are freed through ``state.free``.
    sizes(): available_size (KV tokens one allocation always gets), state_slots_available,
    state_slot_full_token_cost."""

    _destroy = lib.kvpool_unified_mamba_swa_allocator_destroy
    _create = lib.kvpool_unified_mamba_swa_allocator_create
    _as_kv = lib.kvpool_unified_mamba_swa_allocator_kv
    _sizes_of = lib.kvpool_unified_mamba_swa_allocator_sizes
    _snapshot = _MambaSWASnapshot

    def __init__(
        self,
        buffer,
        full_options,
        swa_options,
        state_options,
        full_name="full",
        swa_name="swa",
        state_name="mamba",
    ):
        super().__init__(
            buffer,
            (full_options, swa_options, state_options),
            (full_name, swa_name, state_name),
        )
        self.full, self.swa, self.state = self.sides
        self._sizes = _lib.MambaSWASizes()
