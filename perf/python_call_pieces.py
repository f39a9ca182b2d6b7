#!/usr/bin/env python3
"""Where the host time of a short kvpool.sglang call goes: each row times the whole call
through kvpool.sglang, then the same C function called bare through ctypes with its arguments
made beforehand (the C API and the C++ core), then each piece the binding adds on its own
(the result tensor, torch's current stream, the argument checks, one ctypes crossing).
Medians of host time in us over --calls calls, on the device bench_python.py uses; a call
that allocates runs inside a backup window, restored after each call (untimed).

usage: KVPOOL_LIBRARY=build/cuda-hopper/lib/libkvpool_c.so PYTHONPATH=bindings/python \\
       perf/python_call_pieces.py [--calls N]
KVPOOL_BENCH_TOKENS and KVPOOL_BENCH_LAYERS size the SWA pair as for bench_python.py.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_python as bp  # noqa: E402  (the SWA pair at the peer's geometry, DEVICE)

from kvpool import _tensors  # noqa: E402
from kvpool._lib import lib  # noqa: E402


def median_us(call, calls, window=None):
    """Median host time of call(); window: the allocator whose backup window wraps each call."""
    times = []
    for _ in range(calls):
        undo = window.backup_state() if window is not None else None
        bp.sync()
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
        if window is not None:
            window.restore_state(undo)
    return statistics.median(times[calls // 10 :]) / 1e3


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    n = args.calls
    ok = ctypes.c_int()
    ok_ref = ctypes.byref(ok)
    rows = []
    for ps in (1, 16):
        s = bp.SwaServing(ps, False)
        s.admit([300] * 256)
        seq, seq_d, last = s.decode_inputs()
        a, pair = s.alloc, s.alloc._pair
        stream = pair._stream
        out = torch.empty(256, dtype=torch.int64, device=bp.DEVICE)
        if ps == 1:
            whole = median_us(lambda: a.alloc(256), n, a)
            bare = median_us(
                lambda: lib.kvpool_kv_alloc(pair._kv, stream(), 256, out.data_ptr(), ok_ref),
                n,
                a,
            )
        else:
            whole = median_us(lambda: a.alloc_decode(seq_d, seq, last), n, a)
            bare = median_us(
                lambda: lib.kvpool_kv_alloc_decode(
                    pair._kv, stream(), seq.data_ptr(), 256, last.data_ptr(), out.data_ptr(), ok_ref
                ),
                n,
                a,
            )
        rows.append((f"decode 256, page {ps}", whole, bare))
        virt = bp.ids([r[0] for r in s.requests])
        translated = torch.empty_like(virt)
        side = pair.full
        whole = median_us(lambda: a.translate_kv_loc(virt, out=translated), n)
        bare = median_us(
            lambda: lib.kvpool_multi_ended_allocator_translate(
                side._h, stream(), virt.data_ptr(), 256, translated.data_ptr(), 0
            ),
            n,
        )
        rows.append((f"translate 256 ids (out=), page {ps}", whole, bare))
    print(f"device: {bp.DEVICE}; torch {torch.__version__}; {bp.TOKENS} tokens per side")
    print(f"{'call':36} {'kvpool.sglang':>14} {'bare C call':>12} {'binding':>8}")
    for name, whole, bare in rows:
        print(f"{name:36} {whole:14.2f} {bare:12.2f} {whole - bare:8.2f}")

    template = torch.empty(0, dtype=torch.int64, device=bp.DEVICE)
    host = torch.ones(256, dtype=torch.int64)
    device = template.device
    pieces = [
        ("result tensor (new_empty of 256)", lambda: template.new_empty(256)),
        ("torch's current stream", _tensors.stream_getter(device)),
        ("host ids check (CPU int64 tensor)", lambda: _tensors.host_ids(host, "ids")),
        ("device ids check", lambda: _tensors.device_ids(out, "ids", device, 256)),
        ("a ctypes crossing (no arguments)", lib.kvpool_live_handles),
    ]
    print(f"{'piece':36} {'us':>8}")
    for name, call in pieces:
        print(f"{name:36} {median_us(call, n):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
