"""perf/bench_python.py as it is run to measure the Python rows, on a reduced pool (one
row, a few calls): the JSON it writes, its table, and --repetitions."""

import json
import os
import statistics
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, "perf", "bench_python.py")
ROW = "prefill_alloc/page:16/lazy:0/manual_time"


def run_bench(tmp_path, *args):
    env = dict(os.environ, KVPOOL_BENCH_TOKENS="16384", KVPOOL_BENCH_LAYERS="1", OMP_NUM_THREADS="1")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, BENCH, "--filter", ROW, "--iterations", "4", "--out", str(out), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, out


def test_repetitions_report_the_median_of_their_medians_and_the_spread(tmp_path):
    proc, out = run_bench(tmp_path, "--repetitions", "3")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["context"]["repetitions"] == 3
    row = data["rows"][ROW]
    walls, hosts = row["time_repetitions"], row["host_repetitions"]
    assert len(walls) == 3 and len(hosts) == 3
    assert row["time"] == statistics.median(walls)
    assert row["host"] == statistics.median(hosts)
    # every call's host time ends before its wall time, so each repetition's median does too
    assert all(h <= w for h, w in zip(hosts, walls))
    assert row["spread"] == pytest.approx((max(walls) - min(walls)) / row["time"])
    header, line = proc.stdout.splitlines()[1:3]
    assert "spread" in header.split()
    assert line.split()[0] == ROW and line.split()[3] == f"{100 * row['spread']:.0f}%"


def test_one_repetition_writes_what_it_did_before(tmp_path):
    proc, out = run_bench(tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["context"]["repetitions"] == 1
    assert set(data["rows"][ROW]) == {"time", "host"}
    assert "spread" not in proc.stdout


@pytest.mark.parametrize("arg", [["--repetitions", "0"], ["--iterations", "0"]])
def test_no_repetition_or_call_is_refused(tmp_path, arg):
    proc, out = run_bench(tmp_path, *arg)
    assert proc.returncode == 2
    assert "must be at least 1" in proc.stderr
    assert not out.exists()
