#!/usr/bin/env python3
"""Where the host time of a short kvpool.sglang call goes: each row times the whole call
through kvpool.sglang, then the same C function(s) called bare through ctypes with their
arguments made beforehand (the C API and the C++ core), and their ratio; then each piece the
binding adds on its own (the result tensor, torch's current stream, the argument checks as
the short calls make them in line and as any other input takes them, a ctypes crossing), and
on CUDA the two waits: bench_python.py's for the whole device, kvpool-bench's for a stream.
Medians of host time in us over --calls calls, on the device bench_python.py uses (the SWA
pair; free, flush and the serving step on a lazy one). A call that allocates runs inside a
backup window, restored after each call; a free's request is admitted again after it, and a
serving step's finished requests replaced (untimed).

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
from kvpool._native.handle import _host_run  # noqa: E402


def median_us(call, calls, window=None, before=None, after=None):
    """Median host time of call(); window: the allocator whose backup window wraps each call;
    before / after: untimed set-up and clean-up of each call."""
    times = []
    for _ in range(calls):
        undo = window.backup_state() if window is not None else None
        if before is not None:
            before()
        bp.sync()
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
        if window is not None:
            window.restore_state(undo)
        if after is not None:
            after()
    return statistics.median(times[calls // 10 :]) / 1e3


def short_calls(ps, n):
    """(row, kvpool.sglang us, bare C us) of the eager pair's decode, prefill and translate."""
    s = bp.SwaServing(ps, False)
    s.admit([300] * 256)
    seq, seq_d, last = s.decode_inputs()
    a, pair = s.alloc, s.alloc._pair
    stream = pair._stream
    ok_ref = ctypes.byref(ctypes.c_int())
    out = torch.empty(256, dtype=torch.int64, device=bp.DEVICE)
    rows = []
    if ps == 1:
        whole = median_us(lambda: a.alloc(256), n, a)
        bare = median_us(
            lambda: lib.kvpool_kv_alloc(pair._kv, stream(), 256, out.data_ptr(), ok_ref), n, a
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

    def extend(requests):
        """(kvpool.sglang us, bare C us) of alloc_extend admitting requests x 512 tokens."""
        tokens = requests * 512
        zeros = torch.zeros(requests, dtype=torch.int64)
        new = torch.full((requests,), 512, dtype=torch.int64)
        zeros_d, new_d, new_last = zeros.to(bp.DEVICE), new.to(bp.DEVICE), bp.ids([-1] * requests)
        extend_out = torch.empty(tokens, dtype=torch.int64, device=bp.DEVICE)
        whole = median_us(
            lambda: a.alloc_extend(zeros_d, zeros, new_d, new, new_last, tokens), n, a
        )
        bare = median_us(
            lambda: lib.kvpool_kv_alloc_extend(
                pair._kv,
                stream(),
                zeros.data_ptr(),
                new.data_ptr(),
                requests,
                new_last.data_ptr(),
                extend_out.data_ptr(),
                tokens,
                ok_ref,
            ),
            n,
            a,
        )
        return whole, bare

    rows.append((f"prefill 4x512, page {ps}", *extend(4)))

    # bench_python.py's prefill row as it calls it (alloc at page 1): whether its
    # extra host time over kvpool-bench is in the C call or in the binding around it
    if ps == 1:
        big = 32 * 512
        big_out = torch.empty(big, dtype=torch.int64, device=bp.DEVICE)
        whole = median_us(lambda: a.alloc(big), n, a)
        bare = median_us(
            lambda: lib.kvpool_kv_alloc(pair._kv, stream(), big, big_out.data_ptr(), ok_ref), n, a
        )
        # the same bare call into a result tensor made in the call, as the binding's is:
        # whether the binding's extra time is the tensor (its making or the C call on a
        # fresh one) or the Python around it
        def into_fresh():
            result = big_out.new_empty(big)
            lib.kvpool_kv_alloc(pair._kv, stream(), big, result.data_ptr(), ok_ref)
            return result

        fresh = median_us(into_fresh, n, a)
        rows.append((f"prefill 32x512 (bench_python's row), page {ps}", whole, bare))
        rows.append(("  the same, bare C into a result tensor made in the call", whole, fresh))
    else:
        whole, bare = extend(32)
        rows.append((f"prefill 32x512 (bench_python's row), page {ps}", whole, bare))

    virt = bp.ids([r[0] for r in s.requests])
    translated = torch.empty_like(virt)
    side = pair.full
    whole = median_us(lambda: a.translate_kv_loc(virt, out=translated), n)
    bare = median_us(
        lambda: lib.kvpool_kv_translate(
            side._kv, stream(), virt.data_ptr(), 256, translated.data_ptr(), 0
        ),
        n,
    )
    rows.append((f"translate 256 ids (out=), page {ps}", whole, bare))
    return rows


def lazy_calls(ps, n):
    """(row, kvpool.sglang us, bare C us) of the lazy pair's free, flush and serving step."""
    s = bp.SwaServing(ps, True)
    s.admit([512] * 64)
    a, pair = s.alloc, s.alloc._pair
    stream = pair._stream
    moved = ctypes.byref(ctypes.c_int64())
    ok_ref = ctypes.byref(ctypes.c_int())
    held = {}

    def take_middle():
        held["ids"] = bp.cpu_ids(s.requests.pop(len(s.requests) // 2))

    def readmit():
        a.flush_opportunistic()
        s.admit([512])

    rows = []
    whole = median_us(lambda: a.free(held["ids"]), n, before=take_middle, after=readmit)
    bare = median_us(
        lambda: lib.kvpool_kv_free(pair._kv, stream(), held["ids"].data_ptr(), 512),
        n,
        before=take_middle,
        after=readmit,
    )
    rows.append((f"free a 512-token request, page {ps} lazy", whole, bare))

    whole = median_us(a.flush_opportunistic, n)
    bare = median_us(lambda: lib.kvpool_kv_flush(pair._kv, stream(), moved), n)
    rows.append((f"flush_opportunistic (no moves), page {ps}", whole, bare))

    # decode 256 requests, free the 4 oldest, flush; then 4 short ones admitted (untimed)
    a.clear()
    s.requests.clear()
    s.admit([100] * 256)
    step = {}
    decode_out = torch.empty(256, dtype=torch.int64, device=bp.DEVICE)

    def inputs():
        step["seq"], step["seq_d"], step["last"] = s.decode_inputs()
        step["finished"] = [bp.cpu_ids(r) for r in s.requests[:4]]

    def through_sglang():
        step["out"] = a.alloc_decode(step["seq_d"], step["seq"], step["last"])
        for r in step["finished"]:
            a.free(r)
        a.flush_opportunistic()

    def bare_calls():
        kv, seq, last = pair._kv, step["seq"], step["last"]
        lib.kvpool_kv_alloc_decode(
            kv, stream(), seq.data_ptr(), 256, last.data_ptr(), decode_out.data_ptr(), ok_ref
        )
        for r in step["finished"]:
            lib.kvpool_kv_free(kv, stream(), r.data_ptr(), r.numel())
        lib.kvpool_kv_flush(kv, stream(), moved)
        step["out"] = decode_out

    def replace():
        for r, x in zip(s.requests, step["out"].tolist()):
            r.append(x)
        del s.requests[:4]
        s.admit([64] * 4)

    steps = max(n // 4, 20)
    whole = median_us(through_sglang, steps, before=inputs, after=replace)
    bare = median_us(bare_calls, steps, before=inputs, after=replace)
    rows.append((f"serving step (decode, 4 frees, flush), page {ps} lazy", whole, bare))
    return rows


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    n = args.calls
    rows = []
    for ps in (1, 16):
        rows += short_calls(ps, n)
        rows += lazy_calls(ps, n)
    print(f"device: {bp.DEVICE}; torch {torch.__version__}; {bp.TOKENS} tokens per side")
    print(f"{'call':52} {'kvpool.sglang':>14} {'bare C':>8} {'binding':>8} {'ratio':>6}")
    for name, whole, bare in rows:
        print(f"{name:52} {whole:14.2f} {bare:8.2f} {whole - bare:8.2f} {whole / bare:6.2f}")

    template = torch.empty(0, dtype=torch.int64, device=bp.DEVICE)
    host = torch.ones(256, dtype=torch.int64)
    out = torch.empty(256, dtype=torch.int64, device=bp.DEVICE)
    device = template.device
    pair = bp.SwaServing(1, False).alloc._pair
    pieces = [
        ("result tensor (new_empty of 256)", lambda: template.new_empty(256)),
        ("result tensor (new_empty of 16,384)", lambda: template.new_empty(32 * 512)),
        ("torch's current stream", _tensors.stream_getter(device)),
        ("host ids check (a CPU int64 tensor, in line)", lambda: _host_run(host, "ids")),
        ("host ids check (any other host ids)", lambda: _tensors.host_ids(host, "ids")),
        ("device ids check (last_loc, in line)", lambda: pair._last_loc(out, 256)),
        ("a ctypes crossing (no arguments)", lib.kvpool_live_handles),
    ]
    if bp.DEVICE.type == "cuda":
        # bench_python.py waits for the whole device, kvpool-bench for its instance's stream
        pieces += [
            ("wait on an idle device: the whole device", bp.sync),
            ("wait on an idle device: the current stream", torch.cuda.current_stream().synchronize),
        ]
    print(f"{'piece':52} {'us':>8}")
    for name, call in pieces:
        print(f"{name:52} {median_us(call, n):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
