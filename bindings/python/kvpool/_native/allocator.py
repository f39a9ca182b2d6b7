"""kvpool.native.MultiEndedAllocator: the allocator of one sub-pool (a side), its options,
and the forward-done marker handed to several sides."""

from collections import namedtuple
from ctypes import byref, c_char_p, c_int64, c_void_p

import torch

from .. import _lib
from .._lib import check, lib, raise_status
from .._tensors import device_index_input, host_ids, host_view, stream_getter
from .._tokens import token_handle
from ..layout import mamba_state_view_descriptors, views_from_descriptors
from .handle import _INT64, _TENSOR, _Handle, _host_run, _new
from .kv import _KV, _AllocatorSnapshot

# The short calls' C functions, bound once (kv.py's).
_free = lib.kvpool_kv_free
_free_if_bound = lib.kvpool_multi_ended_allocator_free
_flush = lib.kvpool_multi_ended_allocator_flush
_translate = lib.kvpool_kv_translate  # on the side's KV handle: translate_into checks out= too


def allocator_options(lazy=False, max_moves_per_flush=0, is_id_owner=True, zero_on_alloc=False):
    """One side's options: lazy or eager compaction, the opportunistic flush's move cap (<= 0:
    kvpool's default), whether it mints its ids (a pair sets that itself), and handout zeroing
    (every page it hands out has its bytes zeroed in the alloc-bind launch)."""
    return _lib.AllocatorOptions(
        int(bool(lazy)), int(bool(is_id_owner)), int(max_moves_per_flush), int(bool(zero_on_alloc))
    )


# Per layer, the padded Mamba state's conv and temporal views
# (MultiEndedAllocator.mamba_state_views).
MambaStateViews = namedtuple("MambaStateViews", "conv temporal")


class MultiEndedAllocator(_KV, _Handle):
    """One side of a unified buffer (a MultiEndedAllocator): standalone, or a pair's."""

    _destroy = lib.kvpool_multi_ended_allocator_destroy
    _as_kv = lib.kvpool_multi_ended_allocator_kv
    _snapshot = _AllocatorSnapshot

    def __init__(self, handle, buffer):
        super().__init__(handle)
        self.buffer = buffer
        self.device = buffer.device
        self._stream = stream_getter(self.device)
        self.info = _lib.AllocatorInfo()
        check(lib.kvpool_multi_ended_allocator_info(handle, byref(self.info)))
        self._state = _lib.AllocatorState()
        self._init_kv()
        self._n = c_int64()
        self._n_ref = byref(self._n)
        self._tables = None
        self._move = None

    @classmethod
    def create(cls, buffer, name, options):
        """A standalone side of buffer's sub-pool name; options: allocator_options(...)."""
        return cls(
            _new(
                lib.kvpool_multi_ended_allocator_create,
                buffer._h,
                name.encode(),
                byref(options),
                buffer._stream(),
            ),
            buffer,
        )

    def bind_peer(self, peer):
        check(lib.kvpool_multi_ended_allocator_bind_peer(self._h, peer._h))
        self._tables = peer._tables = None  # binding resizes the v2p table

    # ---------------------------------------------------------------- state
    def state(self):
        """An AllocatorState with the sizes (in tokens), watermark and page counts, now."""
        status = lib.kvpool_multi_ended_allocator_state(self._h, byref(self._state))
        if status:
            raise_status(status)
        return self._state

    def counters(self):
        c = _lib.AllocatorCounters()
        check(lib.kvpool_multi_ended_allocator_counters(self._h, byref(c)))
        return {name: getattr(c, name) for name, _ in c._fields_}

    def state_string(self):
        s = c_char_p()
        check(lib.kvpool_multi_ended_allocator_state_string(self._h, byref(s)))
        return s.value.decode()

    def tables(self):
        """(v2p, p2v): live int64 tensors over the device tables, each with a trailing -1 row."""
        if self._tables is None:
            v2p, v2p_rows, p2v, p2v_rows = c_void_p(), c_int64(), c_void_p(), c_int64()
            check(
                lib.kvpool_multi_ended_allocator_tables(
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
        check(lib.kvpool_multi_ended_allocator_free_virtual_pages(self._h, None, 0, byref(count)))
        out = torch.empty(count.value, dtype=torch.int64)
        check(
            lib.kvpool_multi_ended_allocator_free_virtual_pages(
                self._h, out.data_ptr(), out.numel(), byref(count)
            )
        )
        return out

    def is_slot_allocated(self, token):
        check(lib.kvpool_multi_ended_allocator_is_slot_allocated(self._h, int(token), self._ok_ref))
        return bool(self._ok.value)

    # ---------------------------------------------------------------- relocation
    def set_move_callback(self, move):
        """move(src_pages, dst_pages): numpy int64 views of host memory valid during
        the call; None restores kvpool's own page move inside the unified buffer."""
        if move is None:
            self._move = None
            check(lib.kvpool_multi_ended_allocator_set_move_callback(self._h, _lib.MOVE_FN(), None))
            return

        def on_move(_user, src, dst, n):
            try:
                move(host_view(src, n), host_view(dst, n))
                return 0
            except BaseException as e:  # re-raised when the C call returns
                _lib.note_callback_exception(e)
                return 1

        self._move = _lib.MOVE_FN(on_move)  # kept alive while installed
        check(lib.kvpool_multi_ended_allocator_set_move_callback(self._h, self._move, None))

    # ---------------------------------------------------------------- allocation
    def alloc_with_virtual(self, virtual_pages):
        ids = host_ids(virtual_pages, "virtual_pages")
        check(
            lib.kvpool_multi_ended_allocator_alloc_with_virtual(
                self._h, self._stream(), ids.ptr, ids.n, self._ok_ref
            )
        )
        return bool(self._ok.value)

    # ---------------------------------------------------------------- free and compaction
    def free(self, virtual_tokens, skip_unbound=False):
        ids, ptr, n = _host_run(virtual_tokens, "free_index")
        if skip_unbound:
            status = _free_if_bound(self._h, self._stream(), ptr, n, 1)
        else:
            status = _free(self._kv, self._stream(), ptr, n)
        if status:
            raise_status(status)

    def flush(self, urgent):
        status = _flush(self._h, self._stream(), 1 if urgent else 0, self._n_ref)
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
        status = lib.kvpool_multi_ended_allocator_translate(
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
        kernel_page_multiplier above 1 gives translate_dense()'s dense ids (int64). The
        device checks read is_cpu, or is_cuda and the index, in line: a torch.device made
        and compared per call costs more than the translation of a short batch."""
        cpu, index = self._cpu, self._index
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
            if not (out.is_cpu if cpu else out.is_cuda and out.get_device() == index):
                raise _lib.errors.InvalidArgumentError(
                    f"{what}: out= must be on {self.device}, got {out.device}"
                )
        src = virtual_tokens
        if not (
            type(src) is _TENSOR
            and src.dtype is _INT64
            and (src.is_cpu if cpu else src.is_cuda and src.get_device() == index)
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
            status = _translate(
                self._kv, stream, src.data_ptr(), src.numel(), dst.data_ptr(), dtype is torch.int32
            )
        else:
            status = lib.kvpool_multi_ended_allocator_translate_dense(
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
        status = lib.kvpool_multi_ended_allocator_translate_dense(
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


def set_forward_done(sides, marker):
    """Hands the engine's latest forward-done marker (or None) to each side."""
    _token, handle = token_handle(marker)
    for side in sides:
        side.set_latest_forward_done(handle)
