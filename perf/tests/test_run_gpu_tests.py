"""scripts/run-gpu-tests on a fake build directory: stand-ins for the Catch2 test binaries, for
compute-sanitizer and for kvpool-bench write what the real ones write (a Catch2 XML report, an
ERROR SUMMARY line, a Google Benchmark JSON file), so that the script's runners, counts, statuses,
results file and exit status are checked without a GPU or a build."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_GPU_TESTS = os.path.join(HERE, os.pardir, os.pardir, "scripts", "run-gpu-tests")
COMPARE = os.path.join(HERE, os.pardir, "compare.py")

# A Catch2 test binary: three test cases (one passes, one fails when FAKE_FAIL names this binary,
# one skips), reports as Catch2 3 does and exits like it (failed assertions), or dies with a cut
# report (none with FAKE_CRASH_NO_REPORT) when FAKE_CRASH names it. Every call's arguments are
# appended to <binary>.argv, the GPUs it may see (CUDA_/HIP_VISIBLE_DEVICES) to <binary>.env.
FAKE_TEST_BINARY = '''
import json, os, sys
name = os.path.basename(sys.argv[0])
with open(sys.argv[0] + ".argv", "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
with open(sys.argv[0] + ".env", "a") as f:
    f.write(json.dumps([os.environ.get(v) for v in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")]) + "\\n")
xml = next(a.split("::out=", 1)[1] for a in sys.argv if a.startswith("xml::out="))
if os.environ.get("FAKE_CRASH") == name:
    if not os.environ.get("FAKE_CRASH_NO_REPORT"):
        open(xml, "w").write('<?xml version="1.0"?><Catch2TestRun name="x"><TestCase name="a">')
    sys.exit(139)
fails = os.environ.get("FAKE_FAIL") == name
cases = [("alloc: ids are stable", True, 0), ("free: pages compact", not fails, 0), ("native: on GPUs only", True, 1)]
body = "".join(f'<TestCase name="{n}" tags="[t]"><OverallResult success="{str(ok).lower()}" skips="{s}"/></TestCase>'
               for n, ok, s in cases)
passed = sum(ok and not s for _, ok, s in cases)
with open(xml, "w") as f:
    f.write(f'<?xml version="1.0" encoding="UTF-8"?><Catch2TestRun name="{name}">{body}'
            f'<OverallResults successes="{5 * passed}" failures="{int(fails)}" expectedFailures="0" skips="1"/>'
            f'<OverallResultsCases successes="{passed}" failures="{int(fails)}" expectedFailures="0" skips="1"/>'
            '</Catch2TestRun>')
print("test cases:", len(cases), "failed:", int(fails))
sys.exit(int(fails))
'''

# compute-sanitizer: runs the program after "--tool memcheck" (crashing it when
# FAKE_CRASH_UNDER_SANITIZER is set) and reports FAKE_SANITIZER_ERRORS.
FAKE_SANITIZER = '''
import os, subprocess, sys
if sys.argv[1:] == ["--version"]:
    print("NVIDIA (R) Compute Sanitizer\\nVersion 2099.1.0")
    sys.exit(0)
assert sys.argv[1:3] == ["--tool", "memcheck"], sys.argv
print("========= COMPUTE-SANITIZER", flush=True)
env = dict(os.environ)
if env.get("FAKE_CRASH_UNDER_SANITIZER"):
    env.update(FAKE_CRASH=os.path.basename(sys.argv[3]), FAKE_CRASH_NO_REPORT="1")
rc = subprocess.run(sys.argv[3:], env=env).returncode
print(f"========= ERROR SUMMARY: {os.environ.get('FAKE_SANITIZER_ERRORS', '0')} errors")
sys.exit(rc)
'''

# kvpool-bench: two benchmarks per repetition, and an errored one when FAKE_BENCH_ERROR is set.
FAKE_BENCH = '''
import json, os, sys
with open(sys.argv[0] + ".argv", "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if "=" in a)
runs = []
for i in range(int(flags.get("benchmark_repetitions", "1"))):
    for name, t in (("decode_alloc/page:1/lazy:0/manual_time", 20.0), ("translate/page:1/lazy:0/manual_time", 8.0)):
        runs.append({"name": name, "run_name": name, "run_type": "iteration", "repetition_index": i,
                     "real_time": t + i, "cpu_time": t, "time_unit": "us", "host_us": t / 2})
if os.environ.get("FAKE_BENCH_ERROR"):
    runs.append({"name": "serving_step/manual_time", "run_name": "serving_step/manual_time", "run_type": "iteration",
                 "error_occurred": True, "error_message": "set-up admission failed"})
context = {"date": "2026-12-01T00:00:00+00:00", "host_name": "fake", "device": "Fake GPU 9000",
           "runtime": "CUDA runtime 11.8, driver API 13.0", "kokkos": "Kokkos 3.4.1, default space Cuda"}
with open(flags["benchmark_out"], "w") as f:
    json.dump({"context": context, "benchmarks": runs}, f)
'''

# kvpool-soak: a summary and its JSON line; a failed run (exit 1) for the PAIR:MODE in FAKE_SOAK_FAIL,
# and no JSON line at all (a crash) for the PAIR:MODE in FAKE_SOAK_CRASH.
FAKE_SOAK = '''
import json, os, sys
with open(sys.argv[0] + ".argv", "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
flags = dict(zip(sys.argv[1::2], sys.argv[2::2]))
pair, mode, page = flags["--pair"], flags["--mode"], int(flags["--page-size"])
if os.environ.get("FAKE_SOAK_CRASH") == f"{pair}:{mode}":
    print("kvpool-soak: seed 7")
    sys.exit(134)
failures = ["data check after 10000 operations: 3 stamp words lost"] if os.environ.get("FAKE_SOAK_FAIL") == f"{pair}:{mode}" else []
print("kvpool-soak: seed 7\\nkvpool-soak: " + ("FAILED" if failures else "passed"))
print(json.dumps({"kvpool_soak": pair, "passed": not failures, "ops": int(flags.get("--ops", 1000000)),
                  "seconds": 2.0, "mode": mode, "page_size": page, "seed": 7, "failures": failures}))
sys.exit(1 if failures else 0)
'''

# rocminfo on a machine with one CPU and two AMD GPUs (its layout, trimmed), and an nvidia-smi that
# finds no NVIDIA driver.
FAKE_ROCMINFO = '''
agents = [("AMD EPYC 7763 64-Core Processor", "AMD EPYC 7763 64-Core Processor", "CPU"),
          ("gfx90a", "AMD Instinct MI250X", "GPU"), ("gfx942", "AMD Instinct MI300X", "GPU")]
print("ROCk module is loaded\\n=====================\\nHSA Agents\\n==========")
for i, (name, marketing, kind) in enumerate(agents, 1):
    print(f"*******                  \\nAgent {i}                  \\n*******                  ")
    print(f"  Name:                    {name}\\n  Marketing Name:          {marketing}")
    print(f"  Device Type:             {kind}\\n  ISA Info:\\n    ISA 1\\n      Name:   amdgcn-amd-amdhsa--{name}")
'''
FAKE_NVIDIA_SMI_WITHOUT_DRIVER = '''
import sys
print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
sys.exit(9)
'''

BUILD_INFO = {"commit": "0123456789ab", "kokkos": "Kokkos 3.4.01, devices CUDA,SERIAL, arch AMPERE80",
              "compiler": "GNU 11.4.0", "build_type": "Release"}


class RunGpuTestsTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name
        self.build = os.path.join(self.tmp, "build")
        self.bin = os.path.join(self.build, "bin")
        self.out = os.path.join(self.tmp, "out")
        os.makedirs(self.bin)
        for name in ("kvpool_tests_serial", "kvpool_tests_cuda"):
            self.program(name, FAKE_TEST_BINARY)
        self.program("kvpool-bench", FAKE_BENCH)
        self.program("kvpool-soak", FAKE_SOAK)
        self.sanitizer = self.program("compute-sanitizer", FAKE_SANITIZER, directory=self.tmp)
        self.set_commit(BUILD_INFO["commit"])

    def program(self, name, source, directory=None):
        path = os.path.join(directory or self.bin, name)
        with open(path, "w") as f:
            f.write(f"#!{sys.executable}\n" + textwrap.dedent(source))
        os.chmod(path, 0o755)
        return path

    def set_commit(self, commit):
        with open(os.path.join(self.bin, "kvpool-build.json"), "w") as f:
            json.dump({**BUILD_INFO, "commit": commit}, f)

    def run_script(self, *args, env=None, sanitizer=True):
        extra = ["--compute-sanitizer", self.sanitizer] if sanitizer else []
        return subprocess.run([sys.executable, RUN_GPU_TESTS, self.build, self.out, *extra, *args],
                              capture_output=True, text=True, env={**os.environ, **(env or {})})

    def results(self):
        with open(os.path.join(self.out, "results.json")) as f:
            return json.load(f)

    def step(self, name, *args, returncode=0, env=None, sanitizer=True):
        """Runs the script with --steps name, checks its exit status, returns that step's results."""
        run = self.run_script("--steps", name, *args, env=env, sanitizer=sanitizer)
        self.assertEqual(run.returncode, returncode, run.stdout + run.stderr)
        self.last_output = run.stdout
        return self.results()["steps"][name]

    def argv_of(self, binary):
        with open(os.path.join(self.bin, binary + ".argv")) as f:
            return [json.loads(line) for line in f]

    def test_everything_passes(self):
        run = self.run_script("--kvpool-seeds", "3", "--kvpool-ops", "2000", "--repetitions", "2")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        results = self.results()
        self.assertEqual(results["status"], "passed")
        tests, sanitizer, bench = (results["steps"][s] for s in ("tests", "sanitizer", "benchmarks"))
        self.assertEqual(tests["runner"], "binary")
        self.assertEqual(tests["test_cases"], {"passed": 4, "failed": 0, "skipped": 2})
        self.assertEqual(tests["assertions"], {"passed": 20, "failed": 0})
        self.assertEqual(self.argv_of("kvpool_tests_serial")[0][-4:], ["--kvpool-seeds", "3", "--kvpool-ops", "2000"])
        # The sanitizer runs the CUDA binary alone, on the non-randomised test cases.
        self.assertEqual(len(self.argv_of("kvpool_tests_serial")), 1)
        self.assertEqual(len(self.argv_of("kvpool_tests_cuda")), 2)
        self.assertEqual(self.argv_of("kvpool_tests_cuda")[1][-1], sanitizer["tests"])
        self.assertIn("~[randomised]", sanitizer["tests"])
        self.assertEqual((sanitizer["status"], sanitizer["errors"]), ("passed", 0))
        self.assertEqual(sanitizer["version"], "Version 2099.1.0")
        self.assertEqual((bench["status"], bench["benchmarks"], bench["errored"]), ("passed", 2, {}))
        self.assertIn("--benchmark_min_time=0.05", self.argv_of("kvpool-bench")[0])
        self.assertEqual(len(results["benchmarks"]), 4)
        self.assertEqual(results["steps"]["soak"]["status"], "passed")
        context = results["context"]
        self.assertEqual(context["commit"], "0123456789ab")
        self.assertEqual(context["device"], "Fake GPU 9000")
        self.assertEqual(context["kokkos"], "Kokkos 3.4.1, default space Cuda")
        self.assertIn("Kokkos 3.4.01, devices CUDA,SERIAL, arch AMPERE80", context["build"])
        self.assertEqual({tests["log"], sanitizer["log"], bench["log"]}, {"tests.log", "sanitizer.log", "benchmarks.log"})
        for log in ("tests.log", "sanitizer.log", "benchmarks.log"):
            self.assertTrue(os.path.getsize(os.path.join(self.out, log)) > 0, log)

    def test_results_file_is_read_by_compare(self):
        self.assertEqual(self.run_script("--steps", "benchmarks", "--", "--benchmark_filter=decode").returncode, 0)
        self.assertEqual(self.argv_of("kvpool-bench")[0][-1], "--benchmark_filter=decode")
        self.assertNotIn("--benchmark_min_time=0.05", self.argv_of("kvpool-bench")[0])
        results = os.path.join(self.out, "results.json")
        compare = subprocess.run([sys.executable, COMPARE, results, results], capture_output=True, text=True)
        self.assertEqual(compare.returncode, 0, compare.stderr)
        row = next(line.split() for line in compare.stdout.splitlines() if line.startswith("decode_alloc/"))
        self.assertEqual(row[1:], ["21.0", "21.0", "1.00", "10.0", "10.0", "1.00"])
        self.assertIn("0123456789ab", compare.stdout)

    def test_a_failing_test_case_fails_the_run(self):
        tests = self.step("tests", "--tests", "[t]", returncode=1, env={"FAKE_FAIL": "kvpool_tests_cuda"})
        self.assertEqual(tests["status"], "failed")
        self.assertEqual(tests["test_cases"], {"passed": 3, "failed": 1, "skipped": 2})
        self.assertEqual(tests["failed_tests"], ["kvpool_tests_cuda: free: pages compact"])
        self.assertTrue(tests["binaries"]["kvpool_tests_serial"]["passed"])
        self.assertIn("last", self.last_output)  # the log's tail is shown

    def test_a_crash_fails_the_run(self):
        tests = self.step("tests", "--runner", "binary", returncode=1, env={"FAKE_CRASH": "kvpool_tests_serial"})
        crashed = tests["binaries"]["kvpool_tests_serial"]
        self.assertEqual((crashed["passed"], crashed["exit_status"]), (False, 139))
        self.assertIn("no complete Catch2 report", crashed["error"])
        self.assertIsNone(tests["test_cases"])

    def test_sanitizer_errors_fail_the_run(self):
        sanitizer = self.step("sanitizer", returncode=1, env={"FAKE_SANITIZER_ERRORS": "3"})
        self.assertEqual((sanitizer["status"], sanitizer["errors"]), ("failed", 3))
        self.assertEqual(sanitizer["test_cases"], {"passed": 2, "failed": 0, "skipped": 1})

    def test_a_crash_under_the_sanitizer_is_not_hidden_by_the_tests_report(self):
        run = self.run_script("--steps", "tests,sanitizer", env={"FAKE_CRASH_UNDER_SANITIZER": "1"})
        self.assertEqual(run.returncode, 1)
        steps = self.results()["steps"]
        self.assertEqual((steps["tests"]["status"], steps["sanitizer"]["status"]), ("passed", "failed"))
        self.assertIn("no complete Catch2 report", steps["sanitizer"]["binaries"]["kvpool_tests_cuda"]["error"])

    def test_sanitizer_skipped_without_the_tool_or_a_cuda_binary(self):
        missing = os.path.join(self.tmp, "no-such-sanitizer")
        step = self.step("sanitizer", "--compute-sanitizer", missing, sanitizer=False)
        self.assertEqual(step["status"], "skipped")
        self.assertIn(missing, step["reason"])
        os.remove(os.path.join(self.bin, "kvpool_tests_cuda"))
        step = self.step("sanitizer")
        self.assertEqual(step["status"], "skipped")
        self.assertIn("kvpool_tests_cuda", step["reason"])

    def test_an_errored_benchmark_fails_the_run(self):
        bench = self.step("benchmarks", returncode=1, env={"FAKE_BENCH_ERROR": "1"})
        self.assertEqual(bench["errored"], {"serving_step/manual_time": "set-up admission failed"})
        self.assertEqual(bench["benchmarks"], 2)

    def test_steps_of_one_commit_accumulate(self):
        self.assertEqual(self.run_script("--steps", "tests").returncode, 0)
        self.assertEqual(self.run_script("--steps", "benchmarks").returncode, 0)
        self.assertEqual(set(self.results()["steps"]), {"tests", "benchmarks"})
        run = self.run_script("--steps", "tests", env={"FAKE_FAIL": "kvpool_tests_serial"})
        self.assertEqual(run.returncode, 1)
        results = self.results()
        self.assertEqual((results["status"], results["steps"]["benchmarks"]["status"]), ("failed", "passed"))
        self.assertEqual(len(results["benchmarks"]), 6)  # kept from the earlier run (3 repetitions)
        self.set_commit("fedcba987654")
        self.assertEqual(self.run_script("--steps", "sanitizer").returncode, 0)
        results = self.results()
        self.assertEqual(set(results["steps"]), {"sanitizer"})
        self.assertEqual(results["benchmarks"], [])

    @unittest.skipUnless(shutil.which("cmake") and shutil.which("ctest"), "needs CMake")
    def test_ctest_runner_where_the_build_configured_here(self):
        source = os.path.join(self.tmp, "src")
        os.makedirs(source)
        with open(os.path.join(source, "CMakeLists.txt"), "w") as f:
            f.write("cmake_minimum_required(VERSION 3.20)\nproject(fake NONE)\nenable_testing()\n"
                    "add_test(NAME passes COMMAND true)\nadd_test(NAME fails COMMAND false)\n")
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(["cmake", "-S", source, "-B", self.build, *generator], check=True, capture_output=True)
        tests = self.step("tests", returncode=1)
        self.assertEqual(tests["runner"], "ctest")
        self.assertEqual(tests["test_cases"], {"passed": 1, "failed": 1, "skipped": 0})
        self.assertEqual(tests["failed_tests"], ["fails"])
        # Options for the test binaries choose the binary runner.
        tests = self.step("tests", "--kvpool-seeds", "2")
        self.assertEqual((tests["runner"], tests["test_cases"]["passed"]), ("binary", 4))

    def test_ctest_not_usable_falls_back_to_the_binaries(self):
        with open(os.path.join(self.build, "CTestTestfile.cmake"), "w") as f:
            f.write('include("/nonexistent/build/tests/kvpool_tests_cuda_include.cmake")\n')
        tests = self.step("tests")
        self.assertEqual(tests["runner"], "binary")
        self.assertIn("ctest", tests["runner_reason"])

    def test_soak_runs_each_configuration(self):
        soak = self.step("soak", "--soak-ops", "5000", "--soak-tokens", "1024")
        self.assertEqual(soak["status"], "passed")
        self.assertEqual([(r["pair"], r["mode"], r["page_size"], r["passed"]) for r in soak["runs"]],
                         [("swa", "lazy", 16, True), ("swa", "eager", 1, True), ("mamba", "lazy", 16, True)])
        self.assertEqual([r["result"]["kvpool_soak"] for r in soak["runs"]], ["swa", "swa", "mamba"])
        self.assertEqual(soak["runs"][0]["result"]["ops"], 5000)
        self.assertEqual(self.argv_of("kvpool-soak")[1],
                         ["--pair", "swa", "--mode", "eager", "--page-size", "1", "--ops", "5000", "--tokens", "1024"])
        soak = self.step("soak", "--soak-runs", "mamba:eager:16")
        self.assertEqual(self.argv_of("kvpool-soak")[3], ["--pair", "mamba", "--mode", "eager", "--page-size", "16"])

    def test_a_failing_or_crashing_soak_fails_the_run(self):
        soak = self.step("soak", returncode=1, env={"FAKE_SOAK_FAIL": "swa:eager"})
        self.assertEqual([r["passed"] for r in soak["runs"]], [True, False, True])
        self.assertEqual(soak["failures"], ["swa:eager:1: data check after 10000 operations: 3 stamp words lost"])
        soak = self.step("soak", returncode=1, env={"FAKE_SOAK_CRASH": "mamba:lazy"})
        self.assertEqual(soak["failures"], ["mamba:lazy:16: kvpool-soak wrote no result line"])

    def test_soak_skipped_without_the_binary(self):
        os.remove(os.path.join(self.bin, "kvpool-soak"))
        soak = self.step("soak")
        self.assertEqual(soak["status"], "skipped")
        self.assertIn("kvpool-soak", soak["reason"])

    def test_a_hip_build_on_a_rocm_machine(self):
        os.remove(os.path.join(self.bin, "kvpool_tests_cuda"))
        self.program("kvpool_tests_hip", FAKE_TEST_BINARY)
        with open(os.path.join(self.bin, "kvpool-build.json"), "w") as f:
            json.dump({**BUILD_INFO, "kokkos": "Kokkos 4.6.01, devices HIP,SERIAL, arch AMD_GFX90A"}, f)
        tools = os.path.join(self.tmp, "tools")
        os.makedirs(tools)
        self.program("rocminfo", FAKE_ROCMINFO, directory=tools)
        self.program("nvidia-smi", FAKE_NVIDIA_SMI_WITHOUT_DRIVER, directory=tools)
        path = {"PATH": tools + os.pathsep + os.environ["PATH"]}
        run = self.run_script("--steps", "tests,sanitizer", "--device", "1", "--runner", "binary", env=path)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        results = self.results()
        self.assertEqual(results["context"]["device"], "AMD Instinct MI300X (gfx942)")
        self.assertEqual(results["context"]["device_index"], 1)
        tests = results["steps"]["tests"]
        self.assertEqual(sorted(tests["binaries"]), ["kvpool_tests_hip", "kvpool_tests_serial"])
        self.assertEqual(tests["test_cases"], {"passed": 4, "failed": 0, "skipped": 2})
        with open(os.path.join(self.bin, "kvpool_tests_hip.env")) as f:
            self.assertEqual(json.loads(f.readline()), ["1", "1"])
        sanitizer = results["steps"]["sanitizer"]
        self.assertEqual(sanitizer["status"], "skipped")
        self.assertIn("kvpool_tests_cuda", sanitizer["reason"])
        # Without --device: the first GPU agent, and the runtimes' own choice.
        self.assertEqual(self.run_script("--steps", "tests", "--runner", "binary", env=path).returncode, 0)
        self.assertEqual(self.results()["context"]["device"], "AMD Instinct MI250X (gfx90a)")
        with open(os.path.join(self.bin, "kvpool_tests_hip.env")) as f:
            self.assertEqual(json.loads(f.readlines()[1]), [os.environ.get("CUDA_VISIBLE_DEVICES"),
                                                            os.environ.get("HIP_VISIBLE_DEVICES")])

    def test_bad_usage_exits_2(self):
        cases = {
            "unknown step": [self.build, self.out, "--steps", "tests,coffee"],
            "not a build": [os.path.join(self.tmp, "nowhere"), self.out],
            "bench args without --": [self.build, self.out, "--benchmark_filter=x"],
            "ctest with seeds": [self.build, self.out, "--runner", "ctest", "--kvpool-seeds", "2"],
            "bad soak run": [self.build, self.out, "--soak-runs", "swa:lazy:8"],
            "soak run without a pair": [self.build, self.out, "--soak-runs", "lazy:16"],
            "negative device": [self.build, self.out, "--device", "-1"],
        }
        for label, args in cases.items():
            with self.subTest(label):
                run = subprocess.run([sys.executable, RUN_GPU_TESTS, *args], capture_output=True, text=True)
                self.assertEqual(run.returncode, 2)
                self.assertIn("usage", run.stderr)
                self.assertFalse(os.path.exists(os.path.join(self.out, "results.json")))


if __name__ == "__main__":
    unittest.main()
