"""kvpool's own Python API: thin objects over the C API handles.

Every device call runs on torch's current stream of the object's device and
never synchronises with it. ``kvpool.sglang`` builds the SGLang-compatible
classes on these.
"""

import weakref
from collections import namedtuple
from ctypes import byref, c_char_p, c_int, c_int64, c_uint64, c_void_p

import torch

from . import _lib
from ._lib import check, lib, raise_status
from ._tensors import (
    device_code,
    device_ids,
    device_index_input,
    export,
    host_ids,
    host_view,
    pool_device,
    stream_getter,
)
from ._tokens import token_handle
from .layout import mamba_state_view_descriptors, views_from_descriptors

_INT64 = torch.int64


def _is_host_int64(x):
    """Whether x is a CPU int64 contiguous tensor, whose memory the C API reads in place."""
    return type(x) is torch.Tensor and x.is_cpu and x.dtype is _INT64 and x.is_contiguous()


def _host_run(ids, what):
    """(ids kept alive until the call returns, their address, their count): a CPU int64
    contiguous tensor read in place, anything else through host_ids (its checks and errors)."""
    if _is_host_int64(ids):
        return ids, ids.data_ptr(), ids.numel()
    held = host_ids(ids, what)
    return held, held.ptr, held.n


def side_options(lazy=False, max_moves_per_flush=0, is_id_owner=True, zero_on_alloc=False):
    """One side's options: lazy or eager compaction, the opportunistic flush's move cap (<= 0:
    kvpool's default), whether it mints its ids (a pair sets that itself), and handout zeroing
    (every page it hands out has its bytes zeroed in the alloc-bind launch)."""
    return _lib.SideOptions(
        int(bool(lazy)), int(bool(is_id_owner)), int(max_moves_per_flush), int(bool(zero_on_alloc))
    )


class _Handle:
    """Owns one C API handle, destroyed with the object.

    Tensors over the handle's memory keep the object alive; the object keeps
    only weak references to them (a strong one would make a cycle through
    torch that the garbage collector cannot see), and exports them again when
    the engine has dropped them."""

    _destroy = None

    def __init__(self, handle):
        self._h = handle
        self._exports = {}

    def _exported(self, key, ptr, shape, dtype):
        ref = self._exports.get(key)
        tensor = ref() if ref is not None else None
        if tensor is None:
            tensor = export(ptr, shape, dtype, self.device, self)
            self._exports[key] = weakref.ref(tensor)
        return tensor

    def __del__(self):
        kv = getattr(self, "_kv", None)
        if kv:
            lib.kvpool_kv_destroy(kv)
            self._kv = None
        h = getattr(self, "_h", None)
        if h:
            type(self)._destroy(h)
            self._h = None


def _new(create, *args):
    out = c_void_p()
    check(create(*args, byref(out)))
    return out.value


def _grow_code(name, grow):
    """A sub-pool's KVPOOL_GROW_* code: "up", "down" or "floating" (a bool: grow_down)."""
    if isinstance(grow, bool):
        return _lib.GROW_CODES["down" if grow else "up"]
    if grow not in _lib.GROW_CODES:
        raise _lib.errors.InvalidArgumentError(
            f"sub-pool {name!r}: grow must be 'up', 'down' or 'floating', not {grow!r}"
        )
    return _lib.GROW_CODES[grow]


class UnifiedBuffer(_Handle):
    """The unified byte buffer: ``sides`` a list of ``(name, entry_bytes, page_size,
    grow)`` or ``(name, entry_bytes, page_size, grow, float_at)``, grow "up", "down" or
    "floating" (a bool: whether it grows down). One side, two growing toward each
    other, or more listed from the low end up: one up, the floating ones, one down; a
    floating side's empty band starts at float_at, a fraction of the buffer (0.5 when
    not given). ``buffer``: a uint8 tensor the engine owns, adopted as it is; otherwise
    kvpool allocates the bytes (zeroed) and ``bytes`` exports them."""

    _destroy = lib.kvpool_pool_destroy

    def __init__(self, total_bytes, sides, device, buffer=None):
        self.device = pool_device(device)
        self._stream = stream_getter(self.device)
        self.page_sizes = {name: int(page_size) for name, _, page_size, *_ in sides}
        specs = (_lib.SubPoolSpec * len(sides))()
        for spec, (name, entry_bytes, page_size, grow, *float_at) in zip(specs, sides):
            spec.name = name.encode()
            spec.entry_bytes = int(entry_bytes)
            spec.page_size = int(page_size)
            spec.grow = _grow_code(name, grow)
            spec.max_tokens = 0
            spec.float_at = float(float_at[0]) if float_at else 0.5
        adopt = None
        if buffer is not None:
            if not isinstance(buffer, torch.Tensor) or buffer.dtype != torch.uint8:
                raise _lib.errors.InvalidArgumentError("buffer must be a uint8 tensor")
            if buffer.device != self.device or not buffer.is_contiguous():
                raise _lib.errors.InvalidArgumentError(
                    f"buffer must be contiguous and on {self.device}"
                )
            if buffer.numel() < total_bytes:
                raise _lib.errors.InvalidArgumentError(
                    f"buffer has {buffer.numel()} bytes, total_bytes is {total_bytes}"
                )
            adopt = buffer.data_ptr()
        super().__init__(
            _new(
                lib.kvpool_pool_create_on,
                device_code(self.device),
                int(total_bytes),
                specs,
                len(sides),
                adopt,
                self._stream(),
            )
        )
        self._adopted = buffer[:total_bytes] if buffer is not None else None
        sink = c_int64()
        check(lib.kvpool_pool_sink_bytes(self._h, byref(sink)))
        self.sink_bytes = sink.value

    @property
    def bytes(self):
        """The buffer as a uint8 tensor: the adopted tensor, or kvpool's memory (no copy)."""
        if self._adopted is not None:
            return self._adopted
        data, size = c_void_p(), c_int64()
        check(lib.kvpool_pool_bytes(self._h, byref(data), byref(size)))
        return self._exported("bytes", data.value, (size.value,), torch.uint8)


class _KV:
    """What every allocator (a side, the SWA pair, the Mamba pair, the tri-pool) shares,
    through its KV handle (``kvpool_kv_allocator``, c_api_kv.h): one C entry point per op,
    whatever the allocator. Ids come back as device tensors, None when there is no room."""

    _as_kv = None  # the C call that gives the allocator's KV handle
    _snapshot = None  # the class of what backup_state() returns

    def _init_kv(self):
        """The KV handle, and what every call reuses: the result flag with its reference made
        once, an empty int64 tensor on the device whose new_empty makes each result (a fresh
        tensor, without torch.empty's parsing of dtype and device), and the device's type and
        index."""
        self._kv = _new(type(self)._as_kv, self._h)
        self._ok = c_int()
        self._ok_ref = byref(self._ok)
        self._no_ids = torch.empty(0, dtype=torch.int64, device=self.device)
        self._cpu = self.device.type == "cpu"
        self._index = self.device.index

    def _last_loc(self, last, batch):
        """last_loc as the C call reads it: device_ids' accepted case checked inline (it runs
        on every step), anything else through device_ids (its checks and errors)."""
        if (
            type(last) is torch.Tensor
            and last.dtype is _INT64
            and (last.is_cpu if self._cpu else last.is_cuda and last.get_device() == self._index)
            and last.is_contiguous()
            and last.numel() == batch
        ):
            return last
        return device_ids(last, "last_loc", self.device, batch)

    def alloc(self, need_size):
        """need_size virtual token ids (a multiple of the page size)."""
        n = int(need_size)
        out = self._no_ids.new_empty(n if n > 0 else 0)
        status = lib.kvpool_kv_alloc(self._kv, self._stream(), n, out.data_ptr(), self._ok_ref)
        if status:
            raise_status(status)
        return out if self._ok.value else None

    def alloc_extend(self, prefix_lens_cpu, seq_lens_cpu, last_loc, extend_num_tokens):
        """Prefill: request i grows from prefix_lens_cpu[i] to seq_lens_cpu[i] tokens;
        last_loc[i] (device) is its last prefix token."""
        prefix, prefix_ptr, prefix_n = _host_run(prefix_lens_cpu, "prefix_lens_cpu")
        seq, seq_ptr, batch = _host_run(seq_lens_cpu, "seq_lens_cpu")
        if prefix_n != batch:
            raise _lib.errors.InvalidArgumentError(
                f"alloc_extend: {prefix_n} prefix lengths but {batch} sequence lengths"
            )
        last = self._last_loc(last_loc, batch)
        n = int(extend_num_tokens)
        out = self._no_ids.new_empty(n)
        status = lib.kvpool_kv_alloc_extend(
            self._kv,
            self._stream(),
            prefix_ptr,
            seq_ptr,
            batch,
            last.data_ptr(),
            out.data_ptr(),
            n,
            self._ok_ref,
        )
        if status:
            raise_status(status)
        return out if self._ok.value else None

    def alloc_decode(self, seq_lens_cpu, last_loc):
        """Decode: one token per request; seq_lens_cpu count it already."""
        seq, seq_ptr, batch = _host_run(seq_lens_cpu, "seq_lens_cpu")
        last = self._last_loc(last_loc, batch)
        out = self._no_ids.new_empty(batch)
        status = lib.kvpool_kv_alloc_decode(
            self._kv, self._stream(), seq_ptr, batch, last.data_ptr(), out.data_ptr(), self._ok_ref
        )
        if status:
            raise_status(status)
        return out if self._ok.value else None

    def gate_transfer(self, marker, virtual_tokens, state_slots=()):
        """Move gate: a transfer reads the pages of these virtual tokens (on every KV side)
        and these state slots until marker (an object with query(), or a recorded
        torch.cuda.Event) says it is done; no compaction moves or overwrites them meanwhile
        (see the C API's kvpool_allocator_gate_transfer), checked on every side before any
        changes. An eager free that would is refused with InvalidStateError unless marker is
        a device event."""
        _token, handle = token_handle(marker)
        ids = host_ids(virtual_tokens, "virtual_tokens")
        slots = host_ids(state_slots, "state_slots")
        check(lib.kvpool_kv_gate_transfer(self._kv, handle, ids.ptr, ids.n, slots.ptr, slots.n))

    def free_group_begin(self):
        """Frees (on any side) until free_group_end compact together."""
        check(lib.kvpool_kv_free_group_begin(self._kv))

    def free_group_end(self):
        check(lib.kvpool_kv_free_group_end(self._kv, self._stream()))

    def drain_pending_reuse(self):
        check(lib.kvpool_kv_drain_pending_reuse(self._kv))

    def state_digest(self):
        """A state digest (README, "Tensor-parallel ranks"): a 64-bit int of every host table
        that decides the object's future calls (a composite's: its sides' combined), equal on
        ranks that made the same calls. Host only: no device read, no synchronisation."""
        out = c_uint64()
        check(lib.kvpool_kv_state_digest(self._kv, byref(out)))
        return out.value

    # ---------------------------------------------------------------- state windows
    # Over every side at once: a restore or commit changes all or (on error) none.
    def backup_state(self):
        return self._snapshot(_new(lib.kvpool_kv_backup_state, self._kv))

    def restore_state(self, snapshot):
        check(lib.kvpool_kv_restore_state(self._kv, self._stream(), self._of(snapshot)))

    def commit_state(self, snapshot):
        check(lib.kvpool_kv_commit_state(self._kv, self._of(snapshot)))

    def _of(self, snapshot):
        if not isinstance(snapshot, self._snapshot):
            raise _lib.errors.InvalidArgumentError(
                f"a {type(self).__name__}'s state is what its backup_state() returned, not "
                f"{type(snapshot).__name__}"
            )
        return snapshot._h

    def clear(self):
        check(lib.kvpool_kv_clear(self._kv, self._stream()))

    def check_invariants(self):
        check(lib.kvpool_kv_check_invariants(self._kv, self._stream()))


class _Snapshot(_Handle):
    """A backup window's snapshot (kvpool_kv_snapshot); each kind of allocator takes only
    its own subclass."""

    _destroy = lib.kvpool_kv_snapshot_destroy


class _SideSnapshot(_Snapshot):
    pass


class _PairSnapshot(_Snapshot):
    pass


class _TriPoolSnapshot(_Snapshot):
    pass


# Per layer, the padded Mamba state's conv and temporal views (Side.mamba_state_views).
MambaStateViews = namedtuple("MambaStateViews", "conv temporal")


class Side(_KV, _Handle):
    """One side of a unified buffer (a MultiEndedAllocator): standalone, or a pair's."""

    _destroy = lib.kvpool_allocator_destroy
    _as_kv = lib.kvpool_allocator_kv
    _snapshot = _SideSnapshot

    def __init__(self, handle, buffer):
        super().__init__(handle)
        self.buffer = buffer
        self.device = buffer.device
        self._stream = stream_getter(self.device)
        self.info = _lib.SideInfo()
        check(lib.kvpool_allocator_info(handle, byref(self.info)))
        self._state = _lib.SideState()
        self._init_kv()
        self._n = c_int64()
        self._tables = None
        self._move = None

    @classmethod
    def create(cls, buffer, name, options):
        """A standalone side of buffer's sub-pool name; options: side_options(...)."""
        return cls(
            _new(
                lib.kvpool_allocator_create,
                buffer._h,
                name.encode(),
                byref(options),
                buffer._stream(),
            ),
            buffer,
        )

    def bind_peer(self, peer):
        check(lib.kvpool_allocator_bind_peer(self._h, peer._h))
        self._tables = peer._tables = None  # binding resizes the v2p table

    # ---------------------------------------------------------------- state
    def state(self):
        """A SideState with the sizes (in tokens), watermark and page counts, now."""
        status = lib.kvpool_allocator_state(self._h, byref(self._state))
        if status:
            raise_status(status)
        return self._state

    def counters(self):
        c = _lib.SideCounters()
        check(lib.kvpool_allocator_counters(self._h, byref(c)))
        return {name: getattr(c, name) for name, _ in c._fields_}

    def state_string(self):
        s = c_char_p()
        check(lib.kvpool_allocator_state_string(self._h, byref(s)))
        return s.value.decode()

    def tables(self):
        """(v2p, p2v): live int64 tensors over the device tables, each with a trailing -1 row."""
        if self._tables is None:
            v2p, v2p_rows, p2v, p2v_rows = c_void_p(), c_int64(), c_void_p(), c_int64()
            check(
                lib.kvpool_allocator_tables(
                    self._h, byref(v2p), byref(v2p_rows), byref(p2v), byref(p2v_rows)
                )
            )
            self._tables = ((v2p.value, (v2p_rows.value,)), (p2v.value, (p2v_rows.value,)))
            self._exports.clear()
        (v2p, v2p_shape), (p2v, p2v_shape) = self._tables
        return (
            self._exported("v2p", v2p, v2p_shape, torch.int64),
            self._exported("p2v", p2v, p2v_shape, torch.int64),
        )

    def mamba_state_views(
        self,
        *,
        layers,
        conv_dim,
        conv_width,
        conv_dtype,
        heads,
        head_dim,
        state_dim,
        temporal_dtype,
    ):
        """kvpool's padded Mamba state over this side, as C++'s PageMajorMambaPool lays it out:
        per layer ``conv[l]`` ``(slots, conv_dim, conv_width)`` and ``temporal[l]`` ``(slots,
        heads, head_dim, state_dim)``, indexed by physical slot, every view built from the C
        API's descriptors (kvpool.layout). The side must have page size 1 and the state's entry
        bytes (layout.mamba_state_entry_bytes); otherwise InvalidArgumentError."""
        descriptors = mamba_state_view_descriptors(
            layers=layers,
            conv_dim=conv_dim,
            conv_width=conv_width,
            conv_dtype=conv_dtype,
            heads=heads,
            head_dim=head_dim,
            state_dim=state_dim,
            temporal_dtype=temporal_dtype,
            slots=self.info.num_physical_pages,
        )
        entry = descriptors[0].strides[0] * descriptors[0].element_size()
        if self.info.page_size != 1 or self.info.entry_bytes != entry:
            raise _lib.errors.InvalidArgumentError(
                f"mamba_state_views: the side has page_size {self.info.page_size} and "
                f"entry_bytes {self.info.entry_bytes}; this state needs page size 1 and "
                f"{entry} (layout.mamba_state_entry_bytes)"
            )
        raw = self.buffer.bytes
        return MambaStateViews(
            views_from_descriptors(raw, descriptors[0::2], conv_dtype),
            views_from_descriptors(raw, descriptors[1::2], temporal_dtype),
        )

    def free_virtual_pages(self):
        """The id owner's free virtual pages (host int64 tensor), in the order they are handed out."""
        count = c_int64()
        check(lib.kvpool_allocator_free_virtual_pages(self._h, None, 0, byref(count)))
        out = torch.empty(count.value, dtype=torch.int64)
        check(
            lib.kvpool_allocator_free_virtual_pages(
                self._h, out.data_ptr(), out.numel(), byref(count)
            )
        )
        return out

    def is_slot_allocated(self, token):
        check(lib.kvpool_allocator_is_slot_allocated(self._h, int(token), self._ok_ref))
        return bool(self._ok.value)

    # ---------------------------------------------------------------- relocation
    def set_move_callback(self, move):
        """move(src_pages, dst_pages): numpy int64 views of host memory valid during
        the call; None restores kvpool's own page move inside the unified buffer."""
        if move is None:
            self._move = None
            check(lib.kvpool_allocator_set_move_callback(self._h, _lib.MOVE_FN(), None))
            return

        def on_move(_user, src, dst, n):
            try:
                move(host_view(src, n), host_view(dst, n))
                return 0
            except BaseException as e:  # re-raised when the C call returns
                _lib.note_callback_exception(e)
                return 1

        self._move = _lib.MOVE_FN(on_move)  # kept alive while installed
        check(lib.kvpool_allocator_set_move_callback(self._h, self._move, None))

    # ---------------------------------------------------------------- allocation
    def alloc_with_virtual(self, virtual_pages):
        ids = host_ids(virtual_pages, "virtual_pages")
        check(
            lib.kvpool_allocator_alloc_with_virtual(
                self._h, self._stream(), ids.ptr, ids.n, self._ok_ref
            )
        )
        return bool(self._ok.value)

    # ---------------------------------------------------------------- free and compaction
    def free(self, virtual_tokens, skip_unbound=False):
        ids, ptr, n = _host_run(virtual_tokens, "free_index")
        status = lib.kvpool_allocator_free(self._h, self._stream(), ptr, n, 1 if skip_unbound else 0)
        if status:
            raise_status(status)

    def flush(self, urgent):
        status = lib.kvpool_allocator_flush(
            self._h, self._stream(), 1 if urgent else 0, byref(self._n)
        )
        if status:
            raise_status(status)
        return self._n.value

    def set_latest_forward_done(self, token_handle_or_none):
        """As the composites' set_latest_forward_done, given a token's handle (set_forward_done)."""
        check(lib.kvpool_kv_set_latest_forward_done(self._kv, token_handle_or_none))

    def set_inflight_forward(self, token_handle_or_none, virtual_tokens):
        ids = host_ids(virtual_tokens if virtual_tokens is not None else (), "out_cache_loc")
        check(lib.kvpool_kv_set_inflight_forward(self._kv, token_handle_or_none, ids.ptr, ids.n))

    # ---------------------------------------------------------------- translate
    def translate(self, virtual_tokens, out):
        """Virtual -> physical token ids into out (int64 or int32, contiguous, same
        number of entries; may be virtual_tokens itself)."""
        src = device_index_input(virtual_tokens, "virtual token ids", self.device)
        status = lib.kvpool_allocator_translate(
            self._h,
            self._stream(),
            src.data_ptr(),
            src.numel(),
            out.data_ptr(),
            out.dtype is torch.int32,
        )
        if status:
            raise_status(status)
        return out

    def translate_into(self, virtual_tokens, out, dtype, what, kernel_page_multiplier=1):
        """translate() with SGLang's out= convention, for the call named what: into out
        (dtype, the ids' shape, on this side's device; written in place, through a copy if
        strided) or, when out is None, into a new tensor of dtype. out is checked first. A
        kernel_page_multiplier above 1 gives translate_dense()'s dense ids (int64)."""
        if out is None:
            shape = virtual_tokens.shape
        else:
            if out.dtype is not dtype:
                raise _lib.errors.InvalidArgumentError(
                    f"{what}: out= dtype must be {dtype}, got {out.dtype}"
                )
            if out.shape != virtual_tokens.shape:
                raise _lib.errors.InvalidArgumentError(
                    f"{what}: out= shape {tuple(out.shape)} must match the ids' shape "
                    f"{tuple(virtual_tokens.shape)}"
                )
            if out.device != self.device:
                raise _lib.errors.InvalidArgumentError(
                    f"{what}: out= must be on {self.device}, got {out.device}"
                )
        src = virtual_tokens
        if not (
            type(src) is torch.Tensor
            and src.dtype is _INT64
            and src.device == self.device
            and src.is_contiguous()
        ):
            src = device_index_input(src, "virtual token ids", self.device)
        stream = self._stream()
        if out is not None and out.is_contiguous():
            dst = out
        elif out is None and dtype is _INT64:
            dst = self._no_ids.new_empty(shape)
        else:
            dst = torch.empty(shape if out is None else out.shape, dtype=dtype, device=self.device)
        if kernel_page_multiplier == 1:
            status = lib.kvpool_allocator_translate(
                self._h, stream, src.data_ptr(), src.numel(), dst.data_ptr(), dtype is torch.int32
            )
        else:
            status = lib.kvpool_allocator_translate_dense(
                self._h, stream, src.data_ptr(), src.numel(), dst.data_ptr(), kernel_page_multiplier
            )
        if status:
            raise_status(status)
        if out is None or dst is out:
            return dst
        out.copy_(dst)
        return out

    def translate_dense(self, virtual_tokens, out, kernel_page_multiplier):
        """Virtual -> dense token ids into out (int64, contiguous, same number of entries; may
        be virtual_tokens itself): physical page * page_size * kernel_page_multiplier + offset,
        the rows of an MLA side's dense per-layer views."""
        src = device_index_input(virtual_tokens, "virtual token ids", self.device)
        status = lib.kvpool_allocator_translate_dense(
            self._h,
            self._stream(),
            src.data_ptr(),
            src.numel(),
            out.data_ptr(),
            int(kernel_page_multiplier),
        )
        if status:
            raise_status(status)
        return out

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
        """options: each side's side_options(...); names: each side's sub-pool."""
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
        self._n = c_int64()
        self.sides = tuple(
            Side(_new(lib.kvpool_kv_side, self._kv, which), buffer) for which in range(len(names))
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
        ids, ptr, n = _host_run(virtual_tokens, "free_index")
        status = lib.kvpool_kv_free(self._kv, self._stream(), ptr, n)
        if status:
            raise_status(status)

    def free_swa(self, virtual_tokens):
        """Tokens that left the window: the sliding-window side only."""
        ids = host_ids(virtual_tokens, "free_index")
        check(lib.kvpool_kv_free_swa(self._kv, self._stream(), ids.ptr, ids.n))

    def flush_opportunistic(self):
        """One opportunistic lazy compaction pass over every side; pages moved."""
        check(lib.kvpool_kv_flush(self._kv, self._stream(), byref(self._n)))
        return self._n.value

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


class SwaPair(_Pair):
    """The SWA pair: ``full`` mints the virtual ids, ``swa`` binds them; both or neither."""

    _destroy = lib.kvpool_swa_pair_destroy
    _create = lib.kvpool_swa_pair_create
    _as_kv = lib.kvpool_swa_pair_kv
    _sizes_of = lib.kvpool_swa_pair_sizes

    def __init__(self, buffer, full_options, swa_options, full_name="full", swa_name="swa"):
        super().__init__(buffer, (full_options, swa_options), (full_name, swa_name))
        self.full, self.swa = self.sides
        self._sizes = _lib.SwaSizes()


class MambaPair(_Pair):
    """The Mamba pair: ``full`` KV (paged) and ``state`` slots (page size 1), own ids each.
    Its alloc, alloc_extend, alloc_decode (the full side's) and alloc_state_slots ask the
    eviction callback when short; the sides' own calls do not."""

    _destroy = lib.kvpool_mamba_pair_destroy
    _create = lib.kvpool_mamba_pair_create
    _as_kv = lib.kvpool_mamba_pair_kv
    _sizes_of = lib.kvpool_mamba_pair_sizes

    def __init__(self, buffer, full_options, state_options, full_name="full", state_name="mamba"):
        super().__init__(buffer, (full_options, state_options), (full_name, state_name))
        self.full, self.state = self.sides
        self._sizes = _lib.MambaSizes()


class MambaSwaTriPool(_Pair):
    """The tri-pool: ``state`` slots (up, page size 1), ``swa`` sliding-window KV
    (floating) and ``full`` KV (down) in one buffer. ``full`` mints the token ids and
    ``swa`` binds them (both or neither); state slots own theirs. Each side's translate,
    tables and state are its Side's; state slots are freed through ``state.free``.
    sizes(): available_size (KV tokens one allocation always gets), state_slots_available,
    state_slot_full_token_cost."""

    _destroy = lib.kvpool_mamba_swa_destroy
    _create = lib.kvpool_mamba_swa_create
    _as_kv = lib.kvpool_mamba_swa_kv
    _sizes_of = lib.kvpool_mamba_swa_sizes
    _snapshot = _TriPoolSnapshot

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
        self._sizes = _lib.TriPoolSizes()


def set_forward_done(sides, marker):
    """Hands the engine's latest forward-done marker (or None) to each side."""
    _token, handle = token_handle(marker)
    for side in sides:
        side.set_latest_forward_done(handle)


class ReqTable(_Handle):
    """A request table: rows 1..size for requests, row 0 the padding row; ``table`` is the live tensor."""

    _destroy = lib.kvpool_req_pool_destroy

    def __init__(self, size, max_context_len, device):
        self.device = pool_device(device)
        self._stream = stream_getter(self.device)
        super().__init__(
            _new(
                lib.kvpool_req_pool_create_on,
                device_code(self.device),
                int(size),
                int(max_context_len),
                self._stream(),
            )
        )
        table, rows, columns = c_void_p(), c_int64(), c_int64()
        check(lib.kvpool_req_pool_table(self._h, byref(table), byref(rows), byref(columns)))
        self._table = (table.value, (rows.value, columns.value))
        self._ok = c_int()

    @property
    def table(self):
        return self._exported("table", *self._table, torch.int64)

    def available_size(self):
        n = c_int64()
        check(lib.kvpool_req_pool_available(self._h, byref(n)))
        return n.value

    def generation(self, slot):
        n = c_int64()
        check(lib.kvpool_req_pool_generation(self._h, int(slot), byref(n)))
        return n.value

    def alloc(self, n):
        slots = (c_int64 * max(n, 1))()
        check(lib.kvpool_req_pool_alloc(self._h, int(n), slots, byref(self._ok)))
        return list(slots[:n]) if self._ok.value else None

    def free(self, slots):
        ids = host_ids(slots, "slots")
        check(lib.kvpool_req_pool_free(self._h, ids.ptr, ids.n))

    def clear(self):
        check(lib.kvpool_req_pool_clear(self._h))

    def check_invariants(self):
        check(lib.kvpool_req_pool_check_invariants(self._h, self._stream()))


class HybridReqTable(_Handle):
    """A hybrid model's request table: + request -> Mamba state slot (+ ping-pong
    track slots), state slots taken from ``states`` (a page-size-1 Side)."""

    _destroy = lib.kvpool_hybrid_req_pool_destroy

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
        options = _lib.HybridOptions(
            1 if extra_buffer else 0, 1 if extra_buffer_lazy else 0, int(track_size)
        )
        super().__init__(
            _new(
                lib.kvpool_hybrid_req_pool_create,
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
            lib.kvpool_hybrid_req_pool_tables(
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
        check(lib.kvpool_hybrid_req_pool_available(self._h, byref(self._n)))
        return self._n.value

    def generation(self, slot):
        check(lib.kvpool_hybrid_req_pool_generation(self._h, int(slot), byref(self._n)))
        return self._n.value

    def alloc(self, mamba_slots):
        """One request per entry: a state slot to hand over, or -1 for a fresh one. Slots or None."""
        ids = host_ids(mamba_slots, "mamba_slots")
        slots = (c_int64 * max(ids.n, 1))()
        check(
            lib.kvpool_hybrid_req_pool_alloc(
                self._h, self._stream(), ids.ptr, ids.n, slots, byref(self._ok)
            )
        )
        return list(slots[: ids.n]) if self._ok.value else None

    def free(self, slots):
        ids = host_ids(slots, "slots")
        check(lib.kvpool_hybrid_req_pool_free(self._h, ids.ptr, ids.n))

    def free_mamba_cache(self, req, keep_idx=None):
        check(
            lib.kvpool_hybrid_req_pool_free_mamba_cache(
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
            lib.kvpool_hybrid_req_pool_request(self._h, int(req), byref(mamba), tracks, byref(nxt))
        )
        return mamba.value, list(tracks[: self.track_columns]), nxt.value

    def set_next_track_idx(self, req, idx):
        check(lib.kvpool_hybrid_req_pool_set_next_track_idx(self._h, int(req), int(idx)))

    def set_track_slot(self, req, idx, value):
        check(
            lib.kvpool_hybrid_req_pool_set_track_slot(
                self._h, self._stream(), int(req), int(idx), int(value), byref(self._n)
            )
        )
        return self._n.value

    def donate_track_slot(self, req, new_slot):
        check(
            lib.kvpool_hybrid_req_pool_donate_track_slot(
                self._h, self._stream(), int(req), int(new_slot), byref(self._n)
            )
        )
        return self._n.value

    def alloc_track_slot(self, req, idx):
        check(
            lib.kvpool_hybrid_req_pool_alloc_track_slot(
                self._h, self._stream(), int(req), int(idx), byref(self._ok)
            )
        )
        return bool(self._ok.value)

    def clear(self):
        check(lib.kvpool_hybrid_req_pool_clear(self._h, self._stream()))

    def check_invariants(self):
        check(lib.kvpool_hybrid_req_pool_check_invariants(self._h, self._stream()))


def live_handles():
    return lib.kvpool_live_handles()


__all__ = [
    "UnifiedBuffer",
    "Side",
    "MambaStateViews",
    "SwaPair",
    "MambaPair",
    "MambaSwaTriPool",
    "ReqTable",
    "HybridReqTable",
    "set_forward_done",
    "live_handles",
]


# PD transfer descriptors over a Side (kvpool.transfer), with the rest of the native API.
from .transfer import (  # noqa: E402,F401
    TransferDescriptor,
    TransferLayout,
    copy_runs,
    describe_transfer,
    pair_layer,
    pair_pages,
    pair_runs,
)
