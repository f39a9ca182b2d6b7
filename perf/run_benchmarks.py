#!/usr/bin/env python3
"""Runs kvpool-bench and prints one table: our median, the peer's figure from
perf/peer_baseline.json, the speed-up, and for the KV move the fraction of the
device-to-device copy bandwidth measured in the same run.

usage: perf/run_benchmarks.py BENCH_BINARY [--out results.json] [--repetitions N] [extra benchmark args]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import run_context

HERE = os.path.dirname(os.path.abspath(__file__))


def run(binary, out, repetitions, extra):
    cmd = [binary, "--benchmark_format=console", f"--benchmark_out={out}", "--benchmark_out_format=json",
           f"--benchmark_repetitions={repetitions}"] + extra
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    with open(out) as f:
        results = json.load(f)
    # The build's commit and configuration, and the machine's GPU driver, join the context.
    for key, value in run_context.context(os.path.dirname(os.path.abspath(binary))).items():
        results["context"].setdefault(key, value)
    with open(out, "w") as f:
        json.dump(results, f, indent=2)
    return results


TIME_SCALE_TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def medians(results):
    """Median real time (us), host time (us) and bytes/s per benchmark name over the repetitions;
    from the 'median' aggregate for a name with no single runs (--benchmark_report_aggregates_only).
    Runs that reported an error are left out. Raises KeyError or TypeError on a malformed entry."""
    runs, aggregated = {}, {}
    for b in results["benchmarks"]:
        if b.get("error_occurred"):
            continue
        if b.get("run_type") == "iteration":
            table = runs
        elif b.get("run_type") == "aggregate" and b.get("aggregate_name") == "median":
            table = aggregated
        else:
            continue
        entry = table.setdefault(b["run_name"], {"time": [], "host": [], "bps": []})
        entry["time"].append(b["real_time"] * TIME_SCALE_TO_US[b["time_unit"]])
        if "host_us" in b:
            entry["host"].append(b["host_us"])
        if "bytes_per_second" in b:
            entry["bps"].append(b["bytes_per_second"])
    for name, entry in aggregated.items():
        runs.setdefault(name, entry)
    return {name: {k: statistics.median(v) if v else None for k, v in e.items()} for name, e in runs.items()}


def peer_key(name):
    """('decode_alloc', '16/1') from 'decode_alloc/page:16/lazy:1/manual_time'."""
    parts = name.split("/")
    args = [p.split(":")[1] for p in parts[1:] if ":" in p]
    return parts[0], "/".join(args)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary")
    parser.add_argument("--out", default="kvpool-bench.json")
    parser.add_argument("--repetitions", type=int, default=5)
    args, extra = parser.parse_known_args()
    results = run(args.binary, args.out, args.repetitions, extra)
    with open(os.path.join(HERE, "peer_baseline.json")) as f:
        baseline = json.load(f)
    peer = {**baseline["swa_pair"], **baseline["mamba_pair"]}
    table = medians(results)
    context = results["context"]
    print(f"device: {context.get('device')}; driver: {context.get('driver', 'unknown')}; {context.get('kokkos')}; "
          f"commit {context.get('commit')}; {context.get('date')}")
    copy = {n: m["bps"] for n, m in table.items() if n.startswith("kv_move/device_copy")}
    copy_bps = max(copy.values()) if copy else None
    print(f"{'benchmark':58} {'median us':>10} {'host us':>9} {'peer us':>9} {'speed-up':>9} {'of copy bw':>10}")
    for name in sorted(table):
        m = table[name]
        op, key = peer_key(name)
        peer_us = peer.get(op, {}).get(key)
        speedup = f"{peer_us / m['time']:.1f}x" if peer_us and m["time"] else ""
        bw = f"{m['bps'] / copy_bps:.0%}" if m["bps"] and copy_bps and name.startswith("kv_move") else ""
        host = f"{m['host']:.1f}" if m["host"] is not None else ""
        print(f"{name:58} {m['time']:10.1f} {host:>9} {peer_us if peer_us else '':>9} {speedup:>9} {bw:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
