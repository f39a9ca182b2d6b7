#!/usr/bin/env python3
"""The SGLang-compatible calls of kvpool.sglang at the peer's geometry, timed as
kvpool-bench times the C++ calls (until the device work is done, and host time
until the call returned), printed in perf/run_benchmarks.py's table with the
C++ figure of the same benchmark next to it when given its JSON.

Rows mirror kvpool-bench's (bench_allocator.cpp, bench_mamba.cpp), plus
serving_loop: one whole scheduler step as an engine drives the allocator: a
prefill batch admitted (alloc_extend), every running request decoded
(alloc_decode), the forward's done event and write set handed over, finished
requests freed, an opportunistic flush.

usage: KVPOOL_LIBRARY=build/cuda-hopper/lib/libkvpool_c.so PYTHONPATH=bindings/python \\
       perf/bench_python.py [--cpp kvpool-bench.json] [--out python-bench.json] [--iterations N]
                            [--repetitions R] [--filter S]
--repetitions runs each row R times from a fresh set-up, as kvpool-bench's repetitions do: the
row's figures are the medians of the repetitions' medians, and its spread ((highest - lowest) /
median of the repetitions' wall times) is printed and kept in the JSON with their times.
KVPOOL_BENCH_TOKENS shrinks the pool (and the Mamba slot count with it), and KVPOOL_BENCH_LAYERS
the SWA pair's layers per side (32), as for kvpool-bench.
"""
import argparse
import gc
import json
import os
import random
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_benchmarks  # noqa: E402  (the table's peer figures and key scheme)

import kvpool  # noqa: E402
from kvpool.sglang import (  # noqa: E402
    MambaSubPoolSpec,
    MHASubPoolSpec,
    UnifiedKVPool,
    UnifiedMambaTokenToKVPoolAllocator,
    UnifiedSWATokenToKVPoolAllocator,
)

DEVICE = torch.device("cuda" if kvpool.backend() == "cuda" else "cpu")
TOKENS = int(os.environ.get("KVPOOL_BENCH_TOKENS", "262144"))
SWA_LAYERS = int(os.environ.get("KVPOOL_BENCH_LAYERS", "32"))


# The device-wide wait itself, without torch.cuda.synchronize's Python wrapper (its lazy-init
# check and device guard cost microseconds a call that kvpool-bench's fence does not pay).
_synchronize = getattr(torch._C, "_cuda_synchronize", None) or torch.cuda.synchronize


def sync():
    if DEVICE.type == "cuda":
        _synchronize()


class Timer:
    """Per call: wall time until its device work is done, and host time until it returned."""

    def __init__(self):
        self.wall, self.host = [], []

    def time(self, call):
        sync()
        start = time.perf_counter()
        result = call()
        self.host.append(time.perf_counter() - start)
        sync()
        self.wall.append(time.perf_counter() - start)
        return result

    def medians_us(self):
        return statistics.median(self.wall) * 1e6, statistics.median(self.host) * 1e6


def ids(values):
    return torch.tensor(values, dtype=torch.int64, device=DEVICE)


def cpu_ids(values):
    return torch.tensor(values, dtype=torch.int64)


def admit(alloc, requests, lengths):
    """Fresh requests of these lengths with one alloc_extend; appends their ids to requests."""
    n = len(lengths)
    zeros = torch.zeros(n, dtype=torch.int64)
    seq = cpu_ids(lengths)
    out = alloc.alloc_extend(
        zeros.to(DEVICE), zeros, seq.to(DEVICE), seq, ids([-1] * n), sum(lengths)
    )
    if out is None:
        raise RuntimeError("admission failed")
    host = out.tolist()
    at = 0
    for length in lengths:
        requests.append(host[at : at + length])
        at += length


# ------------------------------------------------------------------ SWA pair


def mha(name, layers, heads, grow):
    return MHASubPoolSpec(
        name=name,
        layer_num=layers,
        grow_direction=grow,
        head_num=heads,
        head_dim=128,
        store_dtype=torch.bfloat16,
    )


class SwaServing:
    """The peer's SWA geometry: 32 layers x 8 heads x 128, bf16, K and V: 128 KiB per token per side
    (KVPOOL_BENCH_LAYERS: fewer layers)."""

    bytes_per_token = SWA_LAYERS * 8 * 128 * 2 * 2

    def __init__(self, page_size, lazy):
        self.ps = page_size
        total = 2 * (TOKENS + page_size) * self.bytes_per_token
        self.pool = UnifiedKVPool(
            total_bytes=total,
            sub_pool_specs=[mha("full", SWA_LAYERS, 8, "up"), mha("swa", SWA_LAYERS, 8, "down")],
            device=DEVICE,
            page_size=page_size,
        )
        self.alloc = UnifiedSWATokenToKVPoolAllocator(
            unified_buffer=self.pool,
            kvcache=None,
            device=DEVICE,
            full_max_total_num_tokens=TOKENS,
            swa_max_total_num_tokens=TOKENS,
            page_size=page_size,
            lazy_compaction=lazy,
        )
        self.requests = []

    def admit(self, lengths):
        admit(self.alloc, self.requests, lengths)

    def decode_inputs(self):
        seq = cpu_ids([len(r) + 1 for r in self.requests])
        return seq, seq.to(DEVICE), ids([r[-1] for r in self.requests])


def prefill_alloc(t, ps, lazy):
    s = SwaServing(ps, lazy)
    zeros, seq = torch.zeros(32, dtype=torch.int64), torch.full((32,), 512, dtype=torch.int64)
    zeros_d, seq_d, last = zeros.to(DEVICE), seq.to(DEVICE), ids([-1] * 32)
    for _ in range(t.iterations):
        undo = s.alloc.backup_state()
        if ps == 1:
            out = t.timer.time(lambda: s.alloc.alloc(32 * 512))
        else:
            out = t.timer.time(
                lambda: s.alloc.alloc_extend(zeros_d, zeros, seq_d, seq, last, 32 * 512)
            )
        assert out is not None
        s.alloc.restore_state(undo)


def decode_alloc(t, ps, lazy):
    s = SwaServing(ps, lazy)
    rng = random.Random(1)
    s.admit([100 + rng.randrange(900) for _ in range(256)])
    seq, seq_d, last = s.decode_inputs()
    for _ in range(t.iterations):
        undo = s.alloc.backup_state()
        if ps == 1:
            out = t.timer.time(lambda: s.alloc.alloc(256))
        else:
            out = t.timer.time(lambda: s.alloc.alloc_decode(seq_d, seq, last))
        assert out is not None
        s.alloc.restore_state(undo)


def free_middle_request(t, ps, lazy):
    """The ids as the scheduler keeps them on the host (a CPU tensor: no device read)."""
    s = SwaServing(ps, lazy)
    for _ in range(4):
        s.admit([512] * 16)
    for _ in range(t.iterations):
        middle = len(s.requests) // 2
        gone = cpu_ids(s.requests.pop(middle))
        t.timer.time(lambda: s.alloc.free(gone))
        s.alloc.flush_opportunistic()
        s.admit([512])


def translate(t, ps, lazy):
    s = SwaServing(ps, lazy)
    s.admit([2048] * 64)
    flat = [x for r in s.requests for x in r]
    virt = ids(flat + flat)
    out = torch.empty_like(virt)
    for _ in range(t.iterations):
        t.timer.time(lambda: s.alloc.translate_kv_loc(virt, out=out))


def lazy_flush(t, ps, _lazy):
    """An urgent flush moving 1 GiB of the full side's KV."""
    s = SwaServing(ps, True)
    tokens = (1 << 30) // SwaServing.bytes_per_token
    full = s.alloc.full_attn_allocator
    for _ in range(max(3, t.iterations // 10)):
        s.alloc.clear()
        s.requests.clear()
        s.admit([tokens])
        s.admit([tokens])
        s.alloc.free(cpu_ids(s.requests[0]))
        moved = full.counters()["bytes_moved"]
        t.timer.time(lambda: full._flush(urgent=True))
        assert full.counters()["bytes_moved"] - moved == 1 << 30, "the flush did not move 1 GiB"


def serving_step(t, ps, lazy):
    """256 running requests: decode all, finish 4, flush (timed), then admit 4 (untimed), as kvpool-bench."""
    s = SwaServing(ps, lazy)
    rng = random.Random(2)
    s.admit([100 + rng.randrange(900) for _ in range(256)])
    for _ in range(t.iterations):
        seq, seq_d, last = s.decode_inputs()
        finished = [cpu_ids(r) for r in s.requests[:4]]

        def step():
            out = s.alloc.alloc_decode(seq_d, seq, last)
            for r in finished:
                s.alloc.free(r)
            s.alloc.flush_opportunistic()
            return out

        out = t.timer.time(step)
        for r, x in zip(s.requests, out.tolist()):
            r.append(x)
        del s.requests[:4]
        s.admit([512] * 4)


def serving_loop(t, ps, lazy):
    """A whole scheduler step as an engine drives the SGLang surface: admit a prefill batch
    of 4 x 512, decode the 256 running requests, hand over the forward's done event and
    write set, free the 4 that finished, flush opportunistically."""
    s = SwaServing(ps, lazy)
    rng = random.Random(3)
    s.admit([100 + rng.randrange(900) for _ in range(252)])
    zeros = torch.zeros(4, dtype=torch.int64)
    new_seq = torch.full((4,), 512, dtype=torch.int64)
    zeros_d, new_seq_d, new_last = zeros.to(DEVICE), new_seq.to(DEVICE), ids([-1] * 4)
    event = torch.cuda.Event() if DEVICE.type == "cuda" else None
    for _ in range(t.iterations):
        seq, seq_d, last = s.decode_inputs()
        finished = [cpu_ids(r) for r in s.requests[:4]]

        def step():
            prefill = s.alloc.alloc_extend(zeros_d, zeros, new_seq_d, new_seq, new_last, 4 * 512)
            decode = s.alloc.alloc_decode(seq_d, seq, last)
            if event is not None:
                event.record()
                s.alloc.set_latest_forward_done_event(event)
                s.alloc.set_inflight_forward(event, decode)
            for r in finished:
                s.alloc.free(r)
            s.alloc.flush_opportunistic()
            return prefill, decode

        prefill, decode = t.timer.time(step)
        for r, x in zip(s.requests, decode.tolist()):
            r.append(x)
        del s.requests[:4]
        host = prefill.tolist()
        s.requests += [host[i * 512 : (i + 1) * 512] for i in range(4)]


# ------------------------------------------------------------------ Mamba pair


class MambaServing:
    """The peer's Mamba geometry: a full side of 8 layers (32 KiB per token) and state slots
    of 25 MiB (25 layers x 1 MiB), 640 of them at 262,144 tokens."""

    full_bytes_per_token = 8 * 8 * 128 * 2 * 2
    state_layers = 25

    def __init__(self, page_size, lazy):
        slots = max(80, TOKENS * 640 // 262144)
        # 1 MiB per layer: conv 1024 x 128 bf16 (256 KiB) and temporal 24 x 128 x 64 fp32 (768 KiB).
        state = MambaSubPoolSpec(
            name="mamba",
            layer_num=self.state_layers,
            grow_direction="down",
            conv_state_shapes=((1024, 128),),
            conv_dtype=torch.bfloat16,
            temporal_state_shape=(24, 128, 64),
            temporal_dtype=torch.float32,
        )
        total = (TOKENS + page_size) * self.full_bytes_per_token + (slots + 1) * state.entry_bytes()
        self.pool = UnifiedKVPool(
            total_bytes=total,
            sub_pool_specs=[mha("full", 8, 8, "up"), state],
            device=DEVICE,
            page_size=page_size,
        )
        self.alloc = UnifiedMambaTokenToKVPoolAllocator(
            unified_buffer=self.pool,
            kvcache=None,
            device=DEVICE,
            page_size=page_size,
            lazy_compaction=lazy,
        )
        self.requests, self.slots = [], []

    def admit(self, lengths):
        admit(self.alloc, self.requests, lengths)
        slots = self.alloc.mamba_allocator.alloc(len(lengths))
        if slots is None:
            raise RuntimeError("admission failed (state slots)")
        self.slots += slots.tolist()


def mamba_decode_alloc(t, ps, lazy):
    s = MambaServing(ps, lazy)
    rng = random.Random(1)
    s.admit([100 + rng.randrange(900) for _ in range(256)])
    seq = cpu_ids([len(r) + 1 for r in s.requests])
    seq_d, last = seq.to(DEVICE), ids([r[-1] for r in s.requests])
    full = s.alloc.full_attn_allocator
    for _ in range(t.iterations):
        undo = full.backup_state()
        if ps == 1:
            out = t.timer.time(lambda: full.alloc(256))
        else:
            out = t.timer.time(lambda: s.alloc.alloc_decode(seq_d, seq, last))
        assert out is not None
        full.restore_state(undo)


def mamba_free_middle(t, ps, lazy, state_slot):
    s = MambaServing(ps, lazy)
    for _ in range(4):
        s.admit([512] * 16)
    for _ in range(t.iterations):
        middle = len(s.requests) // 2
        tokens, slot = cpu_ids(s.requests.pop(middle)), cpu_ids([s.slots.pop(middle)])
        if state_slot:
            t.timer.time(lambda: s.alloc.mamba_allocator.free(slot))
            s.alloc.free(tokens)
        else:
            t.timer.time(lambda: s.alloc.free(tokens))
            s.alloc.mamba_allocator.free(slot)
        s.alloc.flush_opportunistic()
        s.admit([512])


def mamba_free_middle_request(t, ps, lazy):
    mamba_free_middle(t, ps, lazy, False)


def mamba_free_middle_slot(t, ps, lazy):
    mamba_free_middle(t, ps, lazy, True)


def mamba_lazy_flush(t, ps, _lazy):
    """Urgent flushes of both sides moving 13 requests' KV and 13 state slots (325 MiB), as kvpool-bench."""
    s = MambaServing(ps, True)
    for _ in range(max(3, t.iterations // 10)):
        s.alloc.clear()
        s.requests.clear()
        s.slots.clear()
        s.admit([64] * 26)
        for r in range(13):
            s.alloc.free(cpu_ids(s.requests[r]))
            s.alloc.mamba_allocator.free(cpu_ids([s.slots[13 + r]]))
        t.timer.time(
            lambda: (
                s.alloc.full_attn_allocator._flush(urgent=True),
                s.alloc.mamba_allocator._flush(urgent=True),
            )
        )


SWA_MODES = [(1, 0), (1, 1), (16, 0), (16, 1)]
MAMBA_MODES = [(1, 0), (16, 0), (16, 1)]
BENCHMARKS = (
    [
        (f.__name__, f, m)
        for f in (
            prefill_alloc,
            decode_alloc,
            free_middle_request,
            translate,
            serving_step,
            serving_loop,
        )
        for m in SWA_MODES
    ]
    + [("lazy_flush", lazy_flush, (1, None)), ("lazy_flush", lazy_flush, (16, None))]
    + [
        (f.__name__, f, m)
        for f in (mamba_decode_alloc, mamba_free_middle_request, mamba_free_middle_slot)
        for m in MAMBA_MODES
    ]
    + [("mamba_lazy_flush", mamba_lazy_flush, (16, None))]
)


def row_name(op, mode):
    page, lazy = mode
    return f"{op}/page:{page}" + (f"/lazy:{lazy}" if lazy is not None else "") + "/manual_time"


class Task:
    def __init__(self, iterations):
        self.iterations = iterations
        self.timer = Timer()


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cpp", help="kvpool-bench JSON (perf/run_benchmarks.py --out) to compare with"
    )
    parser.add_argument("--out", default="python-bench.json")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--repetitions", type=int, default=1)
    parser.add_argument("--filter", default="", help="run only rows whose name contains this")
    args = parser.parse_args()
    if args.iterations < 1 or args.repetitions < 1:
        parser.error("--iterations and --repetitions must be at least 1")

    with open(os.path.join(HERE, "peer_baseline.json")) as f:
        baseline = json.load(f)
    peer = {**baseline["swa_pair"], **baseline["mamba_pair"]}
    cpp = {}
    if args.cpp:
        with open(args.cpp) as f:
            cpp = run_benchmarks.medians(json.load(f))

    rows = {}
    for op, fn, mode in BENCHMARKS:
        name = row_name(op, mode)
        if args.filter not in name:
            continue
        repetitions = []
        for _ in range(args.repetitions):
            # the last set-up's buffer (64 GiB at the peer's geometry) is gone before the next
            gc.collect()
            task = Task(args.iterations)
            try:
                fn(task, *mode)
            except RuntimeError as e:  # a set-up that does not fit a reduced pool
                print(f"{name}: skipped: {e}", file=sys.stderr)
                break
            task.timer.wall, task.timer.host = (
                task.timer.wall[1:] or task.timer.wall,
                task.timer.host[1:] or task.timer.host,
            )
            repetitions.append(task.timer.medians_us())
        if len(repetitions) < args.repetitions:
            continue
        walls, hosts = [w for w, _ in repetitions], [h for _, h in repetitions]
        wall, host = statistics.median(walls), statistics.median(hosts)
        rows[name] = {"time": wall, "host": host}
        spread = ""
        if args.repetitions > 1:
            rows[name]["time_repetitions"] = walls
            rows[name]["host_repetitions"] = hosts
            rows[name]["spread"] = (max(walls) - min(walls)) / wall
            spread = f", spread {100 * rows[name]['spread']:.0f} %"
        print(f"{name}: {wall:.1f} us ({host:.1f} us host{spread})", file=sys.stderr)

    device = torch.cuda.get_device_name() if DEVICE.type == "cuda" else "host"
    print(
        f"device: {device}; kvpool.sglang over libkvpool_c ({kvpool.backend()}); torch {torch.__version__}; "
        f"{TOKENS} tokens per side; {time.strftime('%Y-%m-%d')}"
    )
    spread_head = f" {'spread':>7}" if args.repetitions > 1 else ""
    print(
        f"{'benchmark':58} {'median us':>10} {'host us':>9}{spread_head} {'C++ us':>9} {'py/C++':>7} "
        f"{'peer us':>9} {'speed-up':>9}"
    )
    for name, m in rows.items():
        op, key = run_benchmarks.peer_key(name)
        peer_us = peer.get(op, {}).get(key)
        speedup = f"{peer_us / m['time']:.1f}x" if peer_us else ""
        c = cpp.get(name, {}).get("time")
        ratio = f"{m['time'] / c:.2f}" if c else ""
        spread = f" {100 * m['spread']:6.0f}%" if "spread" in m else ""
        print(
            f"{name:58} {m['time']:10.1f} {m['host']:9.1f}{spread} {(f'{c:.1f}' if c else ''):>9} "
            f"{ratio:>7} {peer_us if peer_us else '':>9} {speedup:>9}"
        )
    with open(args.out, "w") as f:
        json.dump(
            {
                "context": {
                    "device": device,
                    "tokens_per_side": TOKENS,
                    "torch": torch.__version__,
                    "iterations": args.iterations,
                    "repetitions": args.repetitions,
                },
                "rows": rows,
            },
            f,
            indent=1,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
