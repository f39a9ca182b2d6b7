"""perf/compare.py on synthetic result files: medians, ratios, contexts, unmatched and errored
names, the filter, and exit status 2 on bad input."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

COMPARE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "compare.py")

DECODE = "decode_alloc/page:1/lazy:0/manual_time"
MOVE = "kv_move/native/131072/manual_time"


def iteration(name, real_time, unit="us", **counters):
    return {"name": name, "run_name": name, "run_type": "iteration", "real_time": real_time,
            "cpu_time": real_time, "time_unit": unit, **counters}


def aggregate(name, which, real_time, unit="us", **counters):
    return {"name": f"{name}_{which}", "run_name": name, "run_type": "aggregate", "aggregate_name": which,
            "real_time": real_time, "cpu_time": real_time, "time_unit": unit, **counters}


def errored(name, message):
    return {"name": name, "run_name": name, "run_type": "iteration", "error_occurred": True,
            "error_message": message, "real_time": 0, "cpu_time": 0, "time_unit": "us"}


# A: three repetitions per name (medians 20 us / host 6 us; 1 ms at 2 TB/s), a mean aggregate
# that must not be read, and a name B does not have.
FILE_A = {
    "context": {"device": "NVIDIA H200", "driver": "NVIDIA 580.159.04", "kokkos": "Kokkos 3.4.1, default space Cuda",
                "commit": "aaaa1111", "host_name": "gpu-box", "num_cpus": 16},
    "benchmarks": [
        iteration(DECODE, 30, host_us=7), iteration(DECODE, 10, host_us=5), iteration(DECODE, 20, host_us=6),
        aggregate(DECODE, "mean", 999, host_us=999),
        iteration(MOVE, 1.0, "ms", bytes_per_second=2e12), iteration(MOVE, 1.0, "ms", bytes_per_second=2e12),
        iteration("only_in_a/manual_time", 5),
        iteration("fails_in_b/manual_time", 8),
    ],
}

# B: aggregates only (as --benchmark_report_aggregates_only writes them), in other time units:
# decode 10 us (10,000 ns) with host 3 us, the move 0.5 ms at 4 TB/s; one name errored.
FILE_B = {
    "context": {"device": "AMD Instinct MI300X (gfx942)", "driver": "amdgpu 6.7.0", "commit": "bbbb2222"},
    "benchmarks": [
        aggregate(DECODE, "mean", 50000, "ns", host_us=50), aggregate(DECODE, "median", 10000, "ns", host_us=3),
        aggregate(MOVE, "median", 500, "us", bytes_per_second=4e12),
        iteration("only_in_b/manual_time", 1),
        errored("fails_in_b/manual_time", "set-up admission failed"),
    ],
}


class CompareTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, name, content):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def compare(self, *args):
        return subprocess.run([sys.executable, COMPARE, *args], capture_output=True, text=True)

    def compare_ok(self, *args):
        result = self.compare(self.write("a.json", FILE_A), self.write("b.json", FILE_B), *args)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout.splitlines()

    def row(self, lines, name):
        rows = [line.split() for line in lines if line.split()[:1] == [name]]
        self.assertEqual(len(rows), 1, f"one row for {name} in:\n" + "\n".join(lines))
        return rows[0][1:]

    def section(self, lines, heading):
        start = next(i for i, line in enumerate(lines) if line.startswith(heading))
        items = []
        for line in lines[start + 1:]:
            if not line.startswith("  "):
                break
            items.append(line.strip())
        return items

    def test_medians_and_ratios(self):
        lines = self.compare_ok()
        # time A, time B, B/A, host A, host B, B/A (no bytes/s for the decode)
        self.assertEqual(self.row(lines, DECODE), ["20.0", "10.0", "0.50", "6.0", "3.0", "0.50"])
        # time A, time B, B/A (us), then GB/s A, B, B/A (no host time for the move)
        self.assertEqual(self.row(lines, MOVE), ["1000.0", "500.0", "0.50", "2000.0", "4000.0", "2.00"])
        self.assertIn("geometric mean of B/A, time until done, over 2 benchmarks: 0.50", lines)

    def test_contexts_side_by_side(self):
        lines = self.compare_ok()
        device = next(line for line in lines if line.startswith("device"))
        self.assertIn("NVIDIA H200", device)
        self.assertIn("AMD Instinct MI300X (gfx942)", device)
        self.assertLess(device.index("NVIDIA H200"), device.index("AMD Instinct"))
        commit = next(line for line in lines if line.startswith("commit"))
        self.assertEqual(commit.split()[1:], ["aaaa1111", "bbbb2222"])
        driver = next(line for line in lines if line.startswith("driver"))
        self.assertIn("580.159.04", driver)
        self.assertIn("amdgpu 6.7.0", driver)
        kokkos = next(line for line in lines if line.startswith("kokkos"))
        self.assertTrue(kokkos.rstrip().endswith("-"), "B has no Kokkos entry: shown as '-'")
        self.assertIn("gpu-box (16 CPUs)", next(line for line in lines if line.startswith("host")))

    def test_unmatched_and_errored_names(self):
        lines = self.compare_ok()
        self.assertEqual(self.section(lines, "only in A (2)"), ["only_in_a/manual_time", "fails_in_b/manual_time"])
        self.assertEqual(self.section(lines, "only in B (1)"), ["only_in_b/manual_time"])
        self.assertEqual(self.section(lines, "no result in B (1)"),
                         ["fails_in_b/manual_time: set-up admission failed"])
        self.assertFalse(any(line.startswith("no result in A") for line in lines))

    def test_filter(self):
        lines = self.compare_ok("--filter", "^kv_move/")
        self.assertEqual(self.row(lines, MOVE)[:3], ["1000.0", "500.0", "0.50"])
        self.assertFalse(any(line.startswith(DECODE) for line in lines))
        self.assertFalse(any(line.startswith("only in") for line in lines))

    def test_no_common_name(self):
        other = {"context": {}, "benchmarks": [iteration("something_else", 1)]}
        result = self.compare(self.write("a.json", FILE_A), self.write("b.json", other))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("no benchmark name is in both files", result.stdout)
        self.assertIn("only in B (1):", result.stdout)

    def test_bad_input_exits_2_naming_the_file(self):
        good = self.write("good.json", FILE_A)
        no_unit = {"benchmarks": [{k: v for k, v in iteration("x", 1).items() if k != "time_unit"}]}
        odd_unit = {"benchmarks": [iteration("x", 1, unit="fortnights")]}
        cases = {
            "missing.json": None,
            "not-json.json": "{ this is not JSON",
            "no-list.json": {"context": {}},
            "list-root.json": [1, 2],
            "no-unit.json": no_unit,
            "odd-unit.json": odd_unit,
        }
        for name, content in cases.items():
            with self.subTest(name):
                path = os.path.join(self.dir.name, name) if content is None else self.write(name, content)
                result = self.compare(good, path)
                self.assertEqual(result.returncode, 2)
                self.assertIn(name, result.stderr)
                self.assertEqual(result.stdout, "")

    def test_usage_errors_exit_2(self):
        good = self.write("good.json", FILE_A)
        for args in ([good], [good, good, "--filter", "("]):
            with self.subTest(args=args):
                result = self.compare(*args)
                self.assertEqual(result.returncode, 2)
                self.assertIn("usage", result.stderr)


if __name__ == "__main__":
    unittest.main()
