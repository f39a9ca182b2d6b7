#!/usr/bin/env python3
"""Prints two Google Benchmark result files side by side: both contexts (device, driver, runtime,
Kokkos configuration, build, commit), then per benchmark name the median over the repetitions of
A and B and the ratio B/A for the time until done, the host time (host_us) and bytes/s, then the
names found in one file only. The files can come from different vendors, devices, backends or
commits: benchmark names carry none of these, the context does. A results file of
scripts/run-gpu-tests is read the same way.

usage: perf/compare.py A.json B.json [--filter REGEX]

B/A below 1 means B is faster for times; above 1 means B is faster for bytes/s.
Exit status: 0 after printing, 2 on unreadable input.
"""
import argparse
import json
import math
import os
import re
import sys

from run_benchmarks import medians

CONTEXT_ROWS = (
    ("device", ("device", "gpu")),
    ("driver", ("driver",)),
    ("runtime", ("runtime",)),
    ("kokkos", ("kokkos",)),
    ("build", ("build",)),
    ("commit", ("commit",)),
    ("date", ("date",)),
    ("host", ("host_name",)),
)


class BadInput(Exception):
    pass


def load(path):
    """(context, medians by name, errors by name) of one result file; BadInput when unreadable."""
    try:
        with open(path) as f:
            results = json.load(f)
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}")
    except ValueError as e:
        raise BadInput(f"{path}: not JSON ({e})")
    if not isinstance(results, dict) or not isinstance(results.get("benchmarks"), list):
        raise BadInput(f"{path}: no 'benchmarks' list: not a Google Benchmark result file")
    try:
        table = medians(results)
    except (KeyError, TypeError, AttributeError) as e:
        raise BadInput(f"{path}: malformed benchmark entry (missing or bad {e})")
    errors = {b.get("run_name", b.get("name")): b.get("error_message", "error")
              for b in results["benchmarks"] if isinstance(b, dict) and b.get("error_occurred")}
    context = results.get("context") if isinstance(results.get("context"), dict) else {}
    return context, table, {name: msg for name, msg in errors.items() if name not in table}


def context_value(context, keys):
    for key in keys:
        if context.get(key) not in (None, ""):
            value = str(context[key])
            if key == "host_name" and "num_cpus" in context:
                value += f" ({context['num_cpus']} CPUs)"
            return value
    return "-"


def cell(value, spec):
    return format(value, spec) if value is not None else ""


def ratio_text(r):
    """Two decimals; two significant digits below 0.1."""
    return format(r, ".2f" if r >= 0.1 else ".2g")


def columns(a, b, width, spec):
    """a, b and b / a, right-aligned; cells of a missing value stay empty."""
    r = ratio_text(b / a) if a and b is not None else ""
    return f"{cell(a, spec):>{width}} {cell(b, spec):>{width}} {r:>6}"


def print_contexts(paths, contexts):
    rows = [("file", paths[0], paths[1])]
    rows += [(label, context_value(contexts[0], keys), context_value(contexts[1], keys))
             for label, keys in CONTEXT_ROWS]
    width = max(len(a) for _, a, _ in rows)
    print(f"{'':8} {'A':{width}}  B")
    for label, a, b in rows:
        print(f"{label:8} {a:{width}}  {b}")


def print_table(names, a, b):
    width = max([len("benchmark")] + [len(n) for n in names])
    print(f"{'benchmark':{width}} {'A us':>10} {'B us':>10} {'B/A':>6}   {'A host':>8} {'B host':>8} "
          f"{'B/A':>6}   {'A GB/s':>7} {'B GB/s':>7} {'B/A':>6}")
    for name in names:
        ma, mb = a[name], b[name]
        gbs = [m["bps"] / 1e9 if m["bps"] is not None else None for m in (ma, mb)]
        row = (f"{name:{width}} {columns(ma['time'], mb['time'], 10, '.1f')}   "
               f"{columns(ma['host'], mb['host'], 8, '.1f')}   {columns(*gbs, 7, '.1f')}")
        print(row.rstrip())


def print_unmatched(label, names, errors):
    if names:
        print(f"only in {label} ({len(names)}):")
        for name in names:
            print(f"  {name}")
    if errors:
        print(f"no result in {label} ({len(errors)}):")
        for name, message in errors.items():
            print(f"  {name}: {message}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", metavar="A.json")
    parser.add_argument("b", metavar="B.json")
    parser.add_argument("--filter", metavar="REGEX", help="compare only the benchmark names this regex finds")
    args = parser.parse_args()
    try:
        name_filter = re.compile(args.filter or "")
    except re.error as e:
        parser.error(f"--filter: {e}")
    try:
        (ctx_a, a, err_a), (ctx_b, b, err_b) = load(args.a), load(args.b)
    except BadInput as e:
        print(f"{os.path.basename(sys.argv[0])}: error: {e}", file=sys.stderr)
        return 2

    def wanted(names):
        return [n for n in names if name_filter.search(n)]

    matched = wanted(n for n in a if n in b)
    print_contexts([args.a, args.b], [ctx_a, ctx_b])
    print()
    if matched:
        print_table(matched, a, b)
        print("B/A: below 1 B is faster (times); above 1 B is faster (GB/s).")
        logs = [math.log(b[n]["time"] / a[n]["time"]) for n in matched if a[n]["time"] and b[n]["time"]]
        if logs:
            print(f"geometric mean of B/A, time until done, over {len(logs)} benchmarks: "
                  f"{ratio_text(math.exp(sum(logs) / len(logs)))}")
    else:
        print("no benchmark name is in both files")
    print_unmatched("A", wanted(n for n in a if n not in b), {n: m for n, m in err_a.items() if name_filter.search(n)})
    print_unmatched("B", wanted(n for n in b if n not in a), {n: m for n, m in err_b.items() if name_filter.search(n)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
