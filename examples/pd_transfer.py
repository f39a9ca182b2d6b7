#!/usr/bin/env python3
"""Prefill/decode disaggregation with kvpool between two processes on one device.

Each process runs an engine's SWA-hybrid KV cache as SGLang builds it (UnifiedKVPool,
UnifiedSWAKVPool, UnifiedSWATokenToKVPoolAllocator with lazy compaction) over a buffer the
engine allocated with torch, so torch.multiprocessing hands the prefill's buffer to the
decode process: CUDA IPC on a GPU, shared memory on the CPU. Per request:

1. prefill allocates the request (alloc_extend), writes every layer's K and V (each element
   a stamp of request, position, layer, head and dim), releases the SWA pages left of the
   window (free_swa), describes its full tokens and its window's tokens, gating their pages
   until decode reports the transfer done, and sends both run lists;
2. decode allocates the request (alloc_extend), releases the same SWA prefix, describes its
   tokens gated on the copies' completion, pairs the run lists (pair_runs) and copies half
   of the copies out of the prefill's buffer;
3. both ends compact meanwhile (other requests freed, flushes) and check that the pages
   under transfer stayed where the descriptors say;
4. decode copies the rest and records an event; once it completes the transfer is done on
   both ends: decode checks every transferred element through its own translate and
   publishes the request (its req_to_token row), prefill frees its copy.

usage: python3 examples/pd_transfer.py [--device cuda] [--requests N] [--seed S]
       python3 examples/pd_transfer.py --device cuda --bench   # one 32k-token request: GB/s
"""

import argparse
import random
import sys
import time

import torch
import torch.multiprocessing as mp

from kvpool.native import copy_runs, pair_runs
from kvpool.sglang import (
    MHASubPoolSpec,
    ReqToTokenPool,
    UnifiedKVPool,
    UnifiedSWAKVPool,
    UnifiedSWATokenToKVPoolAllocator,
)

SUB_POOLS = ("full", "swa")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--page-size", type=int, default=4)
    p.add_argument("--layers", type=int, default=4, help="per sub-pool (full and SWA)")
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=8)
    p.add_argument("--window", type=int, default=16, help="sliding window, tokens")
    p.add_argument("--max-tokens", type=int, default=64, help="longest request")
    p.add_argument("--pool-tokens", type=int, default=1024, help="tokens of KV per sub-pool")
    p.add_argument("--bench", action="store_true", help="time one long request's transfer")
    p.add_argument("--bench-tokens", type=int, default=32768)
    p.add_argument("--fragmented", action="store_true", help="bench: the request's pages "
                   "interleaved with another request's (grown a page at a time)")
    p.add_argument("--repeat", type=int, default=20, help="bench: timed copies")
    p.add_argument("--drop-run", action="store_true", help="fault injection: the copy "
                   "engine skips each transfer's last copy (the check must report it)")
    args = p.parse_args(argv)
    if args.bench:
        args.max_tokens = args.bench_tokens
        args.pool_tokens = max(args.pool_tokens, 2 * args.bench_tokens + 4 * args.page_size)
    if args.window % args.page_size:
        p.error("--window must be a multiple of --page-size")
    return args


class Engine:
    """One end: the KV cache and allocator an SGLang engine builds for an SWA model, over a
    buffer the engine owns (torch-allocated, so torch.multiprocessing can share it)."""

    def __init__(self, cfg, buffer):
        self.cfg = cfg
        self.buffer = buffer
        layers = cfg.layers
        self.pool = UnifiedKVPool(
            total_bytes=buffer.numel(),
            sub_pool_specs=sub_pool_specs(cfg),
            device=cfg.device,
            page_size=cfg.page_size,
            buffer=buffer,
        )
        self.kv = UnifiedSWAKVPool(
            unified_buffer=self.pool,
            swa_attention_layer_ids=list(range(1, 2 * layers, 2)),
            full_attention_layer_ids=list(range(0, 2 * layers, 2)),
            page_size=cfg.page_size,
        )
        self.alloc = UnifiedSWATokenToKVPoolAllocator(
            unified_buffer=self.pool,
            kvcache=self.kv,
            device=cfg.device,
            full_max_total_num_tokens=cfg.pool_tokens,
            swa_max_total_num_tokens=cfg.pool_tokens,
            page_size=cfg.page_size,
            lazy_compaction=True,
        )
        self.sub = {"full": self.kv.full_kv_pool, "swa": self.kv.swa_kv_pool}
        self.side = {"full": self.alloc.full_attn_allocator, "swa": self.alloc.swa_attn_allocator}
        self.others = []  # requests of other users: churn for compaction

    def alloc_request(self, n):
        """A new request's n tokens, as a prefill batch of one allocates them."""
        dev = self.cfg.device
        return self.alloc.alloc_extend(
            prefix_lens=torch.zeros(1, dtype=torch.int64, device=dev),
            prefix_lens_cpu=torch.zeros(1, dtype=torch.int64),
            seq_lens=torch.tensor([n], device=dev),
            seq_lens_cpu=torch.tensor([n]),
            last_loc=torch.full((1,), -1, dtype=torch.int64, device=dev),
            extend_num_tokens=n,
        )

    def physical(self, name, tokens):
        """The tokens' physical ids in sub-pool name, int64 on the device."""
        tokens = tokens.to(self.cfg.device)
        if name == "full":
            ids = self.alloc.translate_kv_loc(tokens)
        else:
            ids = self.alloc.translate_loc_from_full_to_swa(tokens)
        return ids.to(torch.int64)

    def rows(self, name, layer, which, tokens):
        """(view, page, slot) of the tokens' rows in one layer's K (0) or V (1) view."""
        view = (self.sub[name].k_buffer if which == 0 else self.sub[name].v_buffer)[layer]
        loc = self.physical(name, tokens)
        return view, loc // view.shape[1], loc % view.shape[1]

    def write(self, name, tokens, positions, request):
        for layer in range(self.cfg.layers):
            for which in (0, 1):
                view, page, slot = self.rows(name, layer, which, tokens)
                view[page, slot] = stamp(self.cfg, request, positions, name, layer, which)

    def wrong_elements(self, name, tokens, positions, request):
        """Elements of the tokens' K and V (every layer) that differ from their stamps."""
        wrong = 0
        for layer in range(self.cfg.layers):
            for which in (0, 1):
                view, page, slot = self.rows(name, layer, which, tokens)
                want = stamp(self.cfg, request, positions, name, layer, which)
                got = view[page, slot]
                wrong += int((got.view(torch.int16) != want.view(torch.int16)).sum())
        return wrong

    def churn(self, rng, max_tokens):
        """Another request finishes, a new one arrives, then a bounded lazy flush: pages
        move under the transfer's feet unless the gate holds them."""
        if self.others and rng.random() < 0.7:
            self.alloc.free(self.others.pop(rng.randrange(len(self.others))))
        n = rng.randint(1, max_tokens)
        if self.alloc.available_size() >= n + self.cfg.page_size:
            got = self.alloc_request(n)
            if got is not None:
                self.others.append(got)
        return self.alloc.flush_opportunistic()


def stamp(cfg, request, positions, name, layer, which):
    """bf16 elements whose bit patterns name (request, position, sub-pool, layer, K/V, head,
    dim): compared as int16, so every byte copied to a wrong place or not at all shows."""
    heads = torch.arange(cfg.heads, device=positions.device).view(1, -1, 1)
    dims = torch.arange(cfg.head_dim, device=positions.device).view(1, 1, -1)
    key = (request * 7919 + SUB_POOLS.index(name) * 104729 + layer * 613 + which * 2801)
    bits = (positions.view(-1, 1, 1) * 40503 + heads * 977 + dims * 31 + key) % 65536
    return (bits - 32768).to(torch.int16).view(torch.bfloat16)


def window_cut(cfg, n):
    """Tokens left of the window (their SWA pages released), a whole number of pages."""
    return max(0, n - cfg.window) // cfg.page_size * cfg.page_size


class Flag:
    """Prefill's marker for a request: done once decode's copies completed."""

    def __init__(self, flags, index):
        self.flags, self.index = flags, index

    def query(self):
        return bool(self.flags[self.index])


class CopiesDone:
    """Decode's marker: the event recorded after its last copy (none yet: not done)."""

    def __init__(self, device):
        self.device = device
        self.event = None

    def record(self):
        if self.device.startswith("cuda"):
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.event = True  # host copies are done when copy_ returns

    def query(self):
        return self.event is True or (self.event is not None and self.event.query())

    def wait(self):
        if self.event is not True:
            self.event.synchronize()


def copy(src, dst, runs):
    """The transfer engine: (src_offset, dst_offset, length) runs out of the prefill's
    buffer (mapped here by CUDA IPC, or shared memory) into decode's, in one launch on the
    current stream."""
    copy_runs(src, dst, runs)


def copy_each(src, dst, runs):
    """The same copies as one copy call (cudaMemcpyAsync) per run: the bench's comparison."""
    for s, d, n in runs.tolist():
        dst[d : d + n].copy_(src[s : s + n], non_blocking=True)


def run_bytes(runs):
    return int(runs[:, 2].sum()) if len(runs) else 0


def sub_pool_specs(cfg):
    """The full and SWA sub-pools, bf16 K and V rows of cfg.layers layers each."""
    spec = dict(head_num=cfg.heads, head_dim=cfg.head_dim, store_dtype=torch.bfloat16)
    return [
        MHASubPoolSpec(name="full", layer_num=cfg.layers, grow_direction="up", **spec),
        MHASubPoolSpec(name="swa", layer_num=cfg.layers, grow_direction="down", **spec),
    ]


def new_buffer(cfg):
    """The engine's KV buffer: room for both sub-pools' tokens and one page of padding."""
    page_bytes = sum(spec.page_bytes(cfg.page_size) for spec in sub_pool_specs(cfg))
    pages = cfg.pool_tokens // cfg.page_size + 2
    buffer = torch.zeros(pages * page_bytes, dtype=torch.uint8, device=cfg.device)
    return buffer if cfg.device.startswith("cuda") else buffer.share_memory_()


# -- decode: the receiving process --


def decode_main(conn, src, flags, cfg):
    torch.manual_seed(cfg.seed)
    if cfg.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(cfg.device).index or 0)
    end = Engine(cfg, new_buffer(cfg))
    req_to_token = ReqToTokenPool(
        size=cfg.requests + 1, max_context_len=cfg.max_tokens, device=cfg.device
    )
    rng = random.Random(cfg.seed + 1)
    stats = dict(copies=0, bytes=0, checked=0, wrong=0, moved=0, published=0)
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            break
        _, r, n, sent_runs = msg
        cut = window_cut(cfg, n)
        dst = end.alloc_request(n)
        assert dst is not None, "decode ran out of KV memory"
        end.alloc.free_swa(dst[:cut])
        done = CopiesDone(cfg.device)
        tokens = {"full": dst.cpu(), "swa": dst[cut:].cpu()}
        runs = torch.cat(
            [
                pair_runs(
                    sent_runs[name],
                    end.side[name]
                    .describe_transfer(tokens[name], end.sub[name].transfer_layout(), done)
                    .page_runs(),
                )
                for name in SUB_POOLS
            ]
        )
        half = len(runs) // 2
        copy(src, end.buffer, runs[:half])
        where = {name: end.physical(name, tokens[name]) for name in SUB_POOLS}
        conn.send(("half", r))
        assert conn.recv() == ("go", r)
        stats["moved"] += end.churn(rng, cfg.max_tokens)
        for name in SUB_POOLS:  # the gate held decode's destination pages too
            assert torch.equal(end.physical(name, tokens[name]), where[name])
        copy(src, end.buffer, runs[half : len(runs) - 1] if cfg.drop_run else runs[half:])
        done.record()
        done.wait()
        flags[r] = 1
        stats["copies"] += len(runs)
        stats["bytes"] += run_bytes(runs)
        if cfg.bench:
            stats.update(bench(cfg, src, end.buffer, runs))
        positions = torch.arange(n, device=cfg.device)
        for name in SUB_POOLS:
            first = 0 if name == "full" else cut
            stats["wrong"] += end.wrong_elements(name, tokens[name], positions[first:], r)
            stats["checked"] += (n - first) * cfg.layers * 2 * cfg.heads * cfg.head_dim
        req = Request()
        (row,) = req_to_token.alloc([req])  # published only now, its bytes in place
        req_to_token.write((row, slice(0, n)), dst)
        assert torch.equal(req_to_token.req_to_token[row, :n].to(dst.dtype), dst)
        stats["published"] += 1
        conn.send(("done", r))
        end.alloc.free(dst)
        req_to_token.free(req)
    for other in end.others:
        end.alloc.free(other)
    end.alloc.check_invariants()
    conn.send(("summary", stats))


class Request:
    """What SGLang's ReqToTokenPool reads of a request: its row, none before alloc."""

    req_pool_idx = None


def bench(cfg, src, dst, runs):
    """The paired copies, by copy_runs and by a copy call per run, timed against one copy of
    the same bytes out of the prefill's buffer (the device-to-device limit through IPC),
    medians of cfg.repeat; GB/s count the bytes transferred once."""
    total = run_bytes(runs)
    scratch = torch.empty(total, dtype=torch.uint8, device=cfg.device)

    def timed(body):
        times = []
        for _ in range(cfg.repeat + 1):
            if cfg.device.startswith("cuda"):
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                body()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop) / 1e3)
            else:
                t0 = time.perf_counter()
                body()
                times.append(time.perf_counter() - t0)
        return sorted(times[1:])[len(times[1:]) // 2]

    t_runs = timed(lambda: copy(src, dst, runs))
    t_each = timed(lambda: copy_each(src, dst, runs))
    t_one = timed(lambda: scratch.copy_(src[:total], non_blocking=True))
    return dict(
        bench_runs=len(runs), bench_bytes=total, runs_s=t_runs, each_s=t_each, one_copy_s=t_one
    )


# -- prefill: the sending process --


def main(argv=None):
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    if cfg.bench:
        cfg.requests = 1
    ctx = mp.get_context("spawn")
    flags = torch.zeros(cfg.requests, dtype=torch.int32).share_memory_()
    buffer = new_buffer(cfg)
    end = Engine(cfg, buffer)
    conn, theirs = ctx.Pipe()
    decode = ctx.Process(target=decode_main, args=(theirs, buffer, flags, cfg))
    decode.start()
    rng = random.Random(cfg.seed)
    moved = 0
    try:
        for r in range(cfg.requests):
            n = cfg.bench_tokens if cfg.bench else rng.randint(1, cfg.max_tokens)
            for _ in range(rng.randint(0, 3) if not cfg.bench else 0):
                moved += end.churn(rng, cfg.max_tokens)
            request = prefill_request(end, cfg, n)
            cut = window_cut(cfg, n)
            positions = torch.arange(n, device=cfg.device)
            end.write("full", request, positions, r)
            end.write("swa", request[cut:], positions[cut:], r)
            end.alloc.free_swa(request[:cut])
            flag = Flag(flags, r)
            tokens = {"full": request.cpu(), "swa": request[cut:].cpu()}
            sent = {
                name: end.side[name]
                .describe_transfer(tokens[name], end.sub[name].transfer_layout(), flag)
                .page_runs()
                for name in SUB_POOLS
            }
            where = {name: end.physical(name, tokens[name]) for name in SUB_POOLS}
            if cfg.device.startswith("cuda"):
                torch.cuda.current_stream().synchronize()  # the stamps are written
            conn.send(("request", r, n, sent))
            assert conn.recv() == ("half", r)
            moved += end.churn(rng, cfg.max_tokens)
            for name in SUB_POOLS:  # in flight: the gate keeps the pages where decode reads
                assert torch.equal(end.physical(name, tokens[name]), where[name])
            conn.send(("go", r))
            assert conn.recv() == ("done", r) and flag.query()
            end.alloc.free(request)
        conn.send(("stop",))
        _, stats = conn.recv()
    finally:
        decode.join(timeout=60)
    for other in end.others:
        end.alloc.free(other)
    end.alloc.check_invariants()
    stats["moved"] += moved
    report(cfg, stats)
    if decode.exitcode != 0 or stats["wrong"]:
        return 1
    return 0


def prefill_request(end, cfg, n):
    """The request's tokens; with --fragmented grown a page at a time alternately with
    another request's, so that its pages are not consecutive."""
    if not (cfg.bench and cfg.fragmented):
        request = end.alloc_request(n)
        assert request is not None, "prefill ran out of KV memory"
        return request
    ps, mine, other = cfg.page_size, [], []
    for _ in range(-(-n // ps)):
        mine.append(end.alloc_request(ps))
        other.append(end.alloc_request(ps))
    end.others.extend(other)
    return torch.cat(mine)[:n]


def report(cfg, s):
    print(
        f"pd_transfer: {cfg.requests} requests on {cfg.device}, page {cfg.page_size}, "
        f"window {cfg.window}: {s['copies']} copies, {s['bytes']} bytes, "
        f"{s['checked']} elements checked, {s['wrong']} wrong, "
        f"{s['published']} published, {s['moved']} pages moved by compaction meanwhile"
    )
    if cfg.bench:
        gbs = s["bench_bytes"] / 1e9
        print(
            f"bench: {cfg.bench_tokens} tokens, {s['bench_bytes'] / 2**20:.1f} MiB in "
            f"{s['bench_runs']} runs{' (fragmented)' if cfg.fragmented else ''}: copy_runs "
            f"{gbs / s['runs_s']:.1f} GB/s, a copy per run {gbs / s['each_s']:.1f} GB/s, one copy "
            f"of the same bytes {gbs / s['one_copy_s']:.1f} GB/s; copy_runs / one copy "
            f"{s['one_copy_s'] / s['runs_s']:.3f}"
        )


if __name__ == "__main__":
    sys.exit(main())
