"""PD transfer descriptors (the C API's kvpool_transfer_*): which bytes of a side's unified
buffer hold a set of tokens, per sub-pool and per layer, as (offset, length) runs, and the
copies that carry one end's tokens to the other's.

A transfer engine registers each end's whole buffer once (``UnifiedKVPool.bytes``: one
region). Per transfer the sender describes the tokens it sends and the receiver the tokens it
allocated for them, each gating their pages on the transfer's marker (no compaction moves
them until it reports done); the engine copies ``pair_pages`` (whole pages, every layer) or
``pair_layer`` (one layer's block) runs. Everything here is host work over the sides' host
mirrors: no device memory is read.
"""

from collections import namedtuple
from ctypes import Structure, addressof, byref, c_int64, c_void_p

import torch

from ._lib import check, lib
from ._tensors import device_code, host_ids, pool_device, stream_of
from ._tokens import token_handle
from .errors import InvalidArgumentError

class _Layout(Structure):
    _fields_ = [
        ("layers", c_int64),
        ("blocks_per_layer", c_int64),
        ("block_offsets_host", c_void_p),
        ("row_bytes_host", c_void_p),
        ("view_page_size", c_int64),
    ]


_INFO_FIELDS = (
    "tokens",
    "pages",
    "page_runs",
    "token_runs",
    "page_size",
    "page_bytes",
    "layers",
    "layer_stride",
    "blocks_per_layer",
)


class _Info(Structure):
    _fields_ = [(name, c_int64) for name in _INFO_FIELDS]


TransferInfo = namedtuple("TransferInfo", _INFO_FIELDS)

class ByteRun(Structure):
    """kvpool_byte_run: the (n, 2) int64 rows the run lists come back as."""

    _fields_ = [("offset", c_int64), ("length", c_int64)]


class CopyRun(Structure):
    """kvpool_copy_run: the (n, 3) int64 rows the pairings come back as."""

    _fields_ = [("src_offset", c_int64), ("dst_offset", c_int64), ("length", c_int64)]


class SubPoolTransferLayout:
    """A sub-pool's page as a transfer engine sees it: ``layers`` equal parts of a page, each
    holding the same blocks, block b at ``block_offsets[b]`` bytes into the part and
    ``page_size`` rows of ``row_bytes[b]``; ``view_page_size`` (0: the side's) the page of the
    views when the side's allocators take larger pages."""

    def __init__(self, layers, block_offsets, row_bytes, view_page_size=0):
        self.layers = int(layers)
        self.block_offsets = [int(x) for x in block_offsets]
        self.row_bytes = [int(x) for x in row_bytes]
        self.view_page_size = int(view_page_size)

    @classmethod
    def from_views(cls, descriptors, blocks_per_layer, view_page_size=0):
        """From kvpool.layout's view descriptors of one page at byte 0, blocks_per_layer of
        them per layer, layer by layer, each indexed (page, token in page, ...): block b sits
        at its view's offset into layer 0's part, its rows one token's stride apart."""
        first = descriptors[:blocks_per_layer]
        offsets = [d.offset for d in first]
        rows = [d.strides[1] * d.element_size() for d in first]
        return cls(len(descriptors) // blocks_per_layer, offsets, rows, view_page_size)

    def _c(self):
        n = len(self.block_offsets)
        offsets = torch.tensor(self.block_offsets, dtype=torch.int64)
        rows = torch.tensor(self.row_bytes, dtype=torch.int64)
        layout = _Layout(self.layers, n, offsets.data_ptr(), rows.data_ptr(), self.view_page_size)
        return layout, (offsets, rows)


def _runs(call, width):
    """A run list from a C call filling (offset, length[, ...]) records: its count first."""
    count = c_int64()
    check(call(None, 0, byref(count)))
    out = torch.empty((count.value, width), dtype=torch.int64)
    if count.value:
        check(call(out.data_ptr(), count.value, byref(count)))
    return out


class TransferDescriptor:
    """The tokens of one transfer on one side: runs over that side's buffer."""

    def __init__(self, handle):
        self._h = handle

    def __del__(self):
        if getattr(self, "_h", None):
            lib.kvpool_transfer_destroy(self._h)
            self._h = None

    def info(self):
        info = _Info()
        check(lib.kvpool_transfer_get_info(self._h, addressof(info)))
        return TransferInfo(*(getattr(info, name) for name in _INFO_FIELDS))

    def page_runs(self):
        """int64 (n, 2): (offset, length) of the tokens' whole pages, consecutive ones merged."""
        return _runs(lambda out, cap, n: lib.kvpool_transfer_page_runs(self._h, out, cap, n), 2)

    def layer_runs(self, layer, block):
        """int64 (n, 2): the runs of one layer's block (MHA: 0 K, 1 V)."""
        return _runs(
            lambda out, cap, n: lib.kvpool_transfer_layer_runs(
                self._h, int(layer), int(block), out, cap, n
            ),
            2,
        )


def describe_transfer(side, layout, virtual_tokens, marker=None):
    """One end of a transfer over a ``kvpool.native.MultiEndedAllocator``: describes the virtual tokens of
    its sub-pool (host ids, in transfer order) and, with a marker (``query()`` or a recorded
    device event), gates their pages until it reports done. The sender passes the tokens it
    sends, the receiver the tokens it allocated for them. Bad ids raise, gating nothing."""
    ids = host_ids(virtual_tokens, "virtual_tokens")
    c_layout, _keep = layout._c()
    _token, token = token_handle(marker)
    handle = c_void_p()
    check(
        lib.kvpool_transfer_describe(
            side._h, addressof(c_layout), token, ids.ptr, ids.n, byref(handle)
        )
    )
    return TransferDescriptor(handle.value)


def pair_pages(src, dst):
    """int64 (n, 3): (src_offset, dst_offset, length) whole-page copies from the sender's
    descriptor to the receiver's (their tokens must sit at the same slots of their pages)."""
    return _runs(
        lambda out, cap, n: lib.kvpool_transfer_pair_pages(src._h, dst._h, out, cap, n), 3
    )


def pair_layer(src, dst, layer, block):
    """int64 (n, 3): the copies of one layer's block."""
    return _runs(
        lambda out, cap, n: lib.kvpool_transfer_pair_layer(
            src._h, dst._h, int(layer), int(block), out, cap, n
        ),
        3,
    )


def _run_list(runs, fields, what):
    """An (n, len(fields)) int64 CPU tensor of runs, contiguous, from a tensor or a list of
    rows; what names the argument in the error."""
    width = len(fields)
    runs = torch.as_tensor(runs, dtype=torch.int64).cpu().contiguous()
    if runs.numel() == 0:
        return runs.reshape(0, width)
    if runs.dim() != 2 or runs.shape[1] != width:
        raise InvalidArgumentError(
            f"{what} must be (n, {width}) ({', '.join(fields)}) runs, "
            f"got shape {tuple(runs.shape)}"
        )
    return runs


def pair_runs(src_runs, dst_runs):
    """int64 (n, 3): the copies carrying the sender's (offset, length) runs into the
    receiver's, byte by byte in order, for ends in different processes that each hold only
    their own descriptor and the runs the other sent (``page_runs()`` or ``layer_runs()``).
    Whole-page runs pair right only when both ends' tokens start at the same slot of a page
    (requests allocated from a page's first slot); one layer's block runs always do.
    Lists holding different numbers of bytes raise."""
    fields = ("offset", "length")
    src = _run_list(src_runs, fields, "pair_runs: src_runs")
    dst = _run_list(dst_runs, fields, "pair_runs: dst_runs")
    return _runs(
        lambda out, cap, n: lib.kvpool_transfer_pair_runs(
            src.data_ptr(), len(src), dst.data_ptr(), len(dst), out, cap, n
        ),
        3,
    )


def copy_runs(src_bytes, dst_bytes, runs):
    """Copies (src_offset, dst_offset, length) runs (pair_pages, pair_layer, pair_runs) from
    one uint8 tensor to another on the same device (the ends' buffers: one mapped from another
    process by CUDA IPC, say) in one launch on torch's current stream, however scattered the
    runs; on a GPU it returns before the copy has run (record an event after it for the
    transfer's completion). A run outside either tensor raises, copying nothing."""
    for name, t in (("src_bytes", src_bytes), ("dst_bytes", dst_bytes)):
        if not (isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1):
            raise InvalidArgumentError(f"copy_runs: {name} must be a 1-D uint8 tensor")
        if not t.is_contiguous():
            raise InvalidArgumentError(f"copy_runs: {name} must be contiguous")
    if src_bytes.device != dst_bytes.device:
        raise InvalidArgumentError(
            f"copy_runs: src_bytes is on {src_bytes.device}, dst_bytes on {dst_bytes.device}"
        )
    runs = _run_list(runs, ("src_offset", "dst_offset", "length"), "copy_runs: runs")
    device = pool_device(dst_bytes.device)
    check(
        lib.kvpool_transfer_copy_runs(
            device_code(device),
            stream_of(device),
            src_bytes.data_ptr(),
            src_bytes.numel(),
            dst_bytes.data_ptr(),
            dst_bytes.numel(),
            runs.data_ptr(),
            len(runs),
        )
    )
