"""The ops every kvpool.native allocator shares, through its KV handle, and the backup
window's snapshots."""

from ctypes import byref, c_int, c_uint64

import torch

from .. import _lib
from .._lib import check, lib, raise_status
from .._tensors import device_ids, host_ids
from .._tokens import token_handle
from .handle import _INT64, _TENSOR, _Handle, _host_run, _new

_alloc = lib.kvpool_kv_alloc
_alloc_extend = lib.kvpool_kv_alloc_extend
_alloc_decode = lib.kvpool_kv_alloc_decode


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
        index. Every array this package hands a call on the KV handle is checked in Python
        first (a tensor's device through torch; host ids are CPU tensors or numpy arrays), so
        the C API is told not to ask the GPU runtime again, array by array."""
        self._kv = _new(type(self)._as_kv, self._h)
        check(lib.kvpool_kv_set_caller_checks_memory(self._kv, 1))
        self._ok = c_int()
        self._ok_ref = byref(self._ok)
        self._no_ids = torch.empty(0, dtype=torch.int64, device=self.device)
        self._cpu = self.device.type == "cpu"
        self._index = self.device.index

    def _last_loc(self, last, batch):
        """last_loc as the C call reads it: device_ids' accepted case checked inline (it runs
        on every step), anything else through device_ids (its checks and errors)."""
        if (
            type(last) is _TENSOR
            and last.dtype is _INT64
            and (last.is_cpu if self._cpu else last.is_cuda and last.get_device() == self._index)
            and last.is_contiguous()
            and last.numel() == batch
        ):
            return last
        return device_ids(last, "last_loc", self.device, batch)

    # The short calls below run on every scheduler step: each checks its arguments in line
    # and crosses into C once, through a function bound when the module loads.
    def alloc(self, need_size):
        """need_size virtual token ids (a multiple of the page size)."""
        n = int(need_size)
        out = self._no_ids.new_empty(n if n > 0 else 0)
        status = _alloc(self._kv, self._stream(), n, out.data_ptr(), self._ok_ref)
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
        status = _alloc_extend(
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
        seq = seq_lens_cpu
        if type(seq) is _TENSOR and seq.is_cpu and seq.dtype is _INT64 and seq.is_contiguous():
            seq_ptr, batch = seq.data_ptr(), seq.numel()
        else:
            seq, seq_ptr, batch = _host_run(seq, "seq_lens_cpu")
        last = last_loc
        if not (
            type(last) is _TENSOR
            and last.dtype is _INT64
            and (last.is_cpu if self._cpu else last.is_cuda and last.get_device() == self._index)
            and last.is_contiguous()
            and last.numel() == batch
        ):
            last = device_ids(last, "last_loc", self.device, batch)
        out = self._no_ids.new_empty(batch)
        status = _alloc_decode(
            self._kv, self._stream(), seq_ptr, batch, last.data_ptr(), out.data_ptr(), self._ok_ref
        )
        if status:
            raise_status(status)
        return out if self._ok.value else None

    def gate_transfer(self, marker, virtual_tokens, state_slots=()):
        """Move gate: a transfer reads the pages of these virtual tokens (on every KV side)
        and these state slots until marker (an object with query(), or a recorded
        torch.cuda.Event) says it is done; no compaction moves or overwrites them meanwhile
        (see the C API's kvpool_multi_ended_allocator_gate_transfer), checked on every side before any
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


class _AllocatorSnapshot(_Snapshot):
    pass


class _PairSnapshot(_Snapshot):
    pass


class _MambaSWASnapshot(_Snapshot):
    pass
