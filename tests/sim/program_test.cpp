// The kvpool-sim program itself: exit codes, messages, and that bad input
// writes nothing.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

using Catch::Matchers::ContainsSubstring;
namespace fs = std::filesystem;

namespace {

struct Outcome {
    int status;
    std::string out;
    std::string err;
};

std::string read_file(const fs::path& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// A scratch directory per test case, removed at the end.
class Scratch {
public:
    Scratch() : dir_(fs::temp_directory_path() / ("kvpool_sim_test_" + std::to_string(getpid()))) {
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    ~Scratch() { fs::remove_all(dir_); }
    fs::path operator/(const std::string& name) const { return dir_ / name; }
    std::size_t entries() const {
        return static_cast<std::size_t>(
            std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
    }

    // environment: VAR=value assignments for the program alone.
    Outcome run(const std::string& args, const std::string& environment = "") const {
        const std::string command =
            environment + " " + std::string(KVPOOL_SIM_PROGRAM) + " --no-progress " + args + " >" +
            (dir_ / "stdout.txt").string() + " 2>" + (dir_ / "stderr.txt").string();
        const int status = std::system(command.c_str());
        Outcome o{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(dir_ / "stdout.txt"),
                  read_file(dir_ / "stderr.txt")};
        fs::remove(dir_ / "stdout.txt");
        fs::remove(dir_ / "stderr.txt");
        return o;
    }
    void write(const std::string& name, const std::string& text) const {
        std::ofstream(dir_ / name) << text;
    }

private:
    fs::path dir_;
};

} // namespace

TEST_CASE("program: --help", "[sim][program]") {
    Scratch scratch;
    const Outcome o = scratch.run("--help");
    CHECK(o.status == 0);
    CHECK_THAT(o.out, ContainsSubstring("Usage: kvpool-sim [options]"));
    CHECK(o.err.empty());
}

TEST_CASE("program: a malformed trace exits 2 naming the line, and writes nothing",
          "[sim][program]") {
    Scratch scratch;
    scratch.write("trace.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,-3\n");
    const auto json = (scratch / "out.json").string();
    const auto csv = (scratch / "out.csv").string();
    const Outcome o = scratch.run("--workload " + (scratch / "trace.csv").string() + " --json " +
                                  json + " --csv " + csv);
    CHECK(o.status == 2);
    CHECK_THAT(
        o.err,
        ContainsSubstring(
            "trace.csv:3: output_tokens must be a whole number from 1 to 16777216, got '-3'"));
    CHECK(o.out.empty());
    CHECK(scratch.entries() == 1); // the trace alone
}

TEST_CASE("program: a Mooncake trace runs with the prefix cache; a malformed line exits 2",
          "[sim][program][prefix-cache]") {
    Scratch scratch;
    // Two turns of one conversation and an unrelated request, in the Mooncake format.
    scratch.write("trace.jsonl",
                  "{\"timestamp\": 0, \"input_length\": 2100, \"output_length\": 50, "
                  "\"hash_ids\": [0, 1, 2, 3, 4]}\n"
                  "{\"timestamp\": 4000, \"input_length\": 2600, \"output_length\": 40, "
                  "\"hash_ids\": [0, 1, 2, 3, 5, 6]}\n"
                  "{\"timestamp\": 4500, \"input_length\": 900, \"output_length\": 30, "
                  "\"hash_ids\": [7, 8]}\n");
    const auto json = scratch / "out.json";
    Outcome o = scratch.run("--model qwen3-next-80b --memory 8GiB --sweep 3 --workload " +
                            (scratch / "trace.jsonl").string() + " --json " + json.string());
    CHECK(o.status == 0);
    CHECK_THAT(o.out, ContainsSubstring("prefix hashes of 512-token blocks"));
    CHECK_THAT(o.out, ContainsSubstring("prefix hits (tokens taken from the prefix cache"));
    // The second turn takes its 4 blocks from the cache: 2048 of 2100 + 2600 + 900 tokens.
    CHECK_THAT(read_file(json), ContainsSubstring("\"prefix_hit_tokens\": 2048, "));
    o = scratch.run("--model qwen3-next-80b --memory 8GiB --sweep 3 --no-prefix-cache --workload " +
                    (scratch / "trace.jsonl").string() + " --json " + json.string());
    CHECK(o.status == 0);
    CHECK_THAT(read_file(json), ContainsSubstring("\"prefix_hit_tokens\": 0, "));

    scratch.write("bad.jsonl", "{\"timestamp\": 0, \"input_length\": 700, \"output_length\": "
                               "5, \"hash_ids\": [0, 1]}\n"
                               "{\"timestamp\": 5, \"input_length\": 700, \"output_length\": "
                               "5, \"hash_ids\": [0, x]}\n");
    const auto out = scratch / "bad.json";
    o = scratch.run("--workload " + (scratch / "bad.jsonl").string() + " --json " + out.string());
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("bad.jsonl:2: not a JSON object"));
    CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("program: a configuration that cannot run exits 2 naming what is infeasible",
          "[sim][program][floor]") {
    Scratch scratch;
    const auto json = (scratch / "out.json").string();
    // Gemma's longest shift document (131072 prompt tokens) on the sliding-window
    // side of the engine default's split: counted, not an error, when not asked for.
    Outcome o = scratch.run("--workload shift --swa-full-tokens-ratio 0.8 --json " + json);
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("the fixed split --swa-full-tokens-ratio 0.80 cannot run: "
                                        "its sliding-window side holds 130048 tokens, and the "
                                        "longest request (131072 prompt + 113 output tokens) "
                                        "needs 131072 there"));
    // A quarter of 8 GiB holds 87,376 tokens of 24 KiB.
    o = scratch.run("--model qwen3-next-80b --memory 8GiB --mamba-full-memory-ratio 3 "
                    "--context-length 100000 --requests 5");
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("its full-attention side holds 87376 tokens, and the "
                                        "longest request (100000 prompt + 0 output tokens)"));
    CHECK_THAT(o.err, ContainsSubstring("(--context-length 100000)"));
    o = scratch.run("--context-length 300000");
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("--context-length 300000: --memory 64.0 GiB is too small"));
    o = scratch.run("--model qwen3-next-80b --swa-full-tokens-ratio 0.5");
    CHECK(o.status == 2);
    CHECK_THAT(o.err,
               ContainsSubstring("--swa-full-tokens-ratio: qwen3-next-80b has no such knob"));
    CHECK(scratch.entries() == 0);
    // A split that holds every request runs, in place of the engine default.
    o = scratch.run("--model qwen3-next-80b --requests 40 --sweep 2 --mamba-full-memory-ratio 0.5");
    CHECK(o.status == 0);
    CHECK_THAT(o.out, ContainsSubstring("fixed split, as configured       0.50 (67% full)"));
}

TEST_CASE("program: other bad input exits 2 with a clear message", "[sim][program]") {
    Scratch scratch;
    Outcome o = scratch.run("--model gemma4-1t");
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("unknown model 'gemma4-1t': not a preset"));
    o = scratch.run("--memory 1MiB");
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("--memory 1.0 MiB is too small"));
    o = scratch.run("--memory huge");
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("--memory: 'huge' is not a byte size"));
    o = scratch.run("--sweep");
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("--sweep needs a value"));
    o = scratch.run("--json " + (scratch / "no-such-dir" / "out.json").string());
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("cannot write"));
    CHECK(scratch.entries() == 0);
}

TEST_CASE("program: a small run writes the table, JSON and CSV", "[sim][program]") {
    Scratch scratch;
    scratch.write("trace.jsonl",
                  "{\"arrival_s\": 0, \"prompt_tokens\": 3000, \"output_tokens\": 200}\n"
                  "{\"arrival_s\": 0.1, \"prompt_tokens\": 500, \"output_tokens\": 900}\n"
                  "{\"arrival_s\": 0.2, \"prompt_tokens\": 9000, \"output_tokens\": 50}\n");
    const auto json = scratch / "out.json";
    const auto csv = scratch / "out.csv";
    const Outcome o = scratch.run("--model gpt-oss-120b --memory 2GiB --sweep 3 --workload " +
                                  (scratch / "trace.jsonl").string() + " --json " + json.string() +
                                  " --csv " + csv.string());
    CHECK(o.status == 0);
    CHECK(o.err.empty());
    CHECK_THAT(o.out, ContainsSubstring("fixed split, oracle (best of 4)"));
    CHECK_THAT(read_file(json), ContainsSubstring("\"oracle_index\": "));
    CHECK_THAT(read_file(json), ContainsSubstring("\"role\": \"unified_lazy\""));
    CHECK_THAT(read_file(json), ContainsSubstring("\"ttft_p99_s\": "));
    CHECK_THAT(read_file(json), ContainsSubstring("\"itl_p90_s\": "));
    CHECK_THAT(o.out, ContainsSubstring("TTFT s"));
    CHECK_THAT(o.out, ContainsSubstring("unified (lazy) vs that split, p99: "));
    const std::string table = read_file(csv);
    CHECK_THAT(table, ContainsSubstring(",ttft_p50_s,ttft_p90_s,ttft_p99_s,itl_p50_s,"));
    CHECK(std::count(table.begin(), table.end(), '\n') ==
          1 + 4 + 4);              // header, compared rows, sweep
    CHECK(scratch.entries() == 3); // no temporary file left behind
}

TEST_CASE("program: a bad phase list exits 2 naming the value, and writes nothing",
          "[sim][program][phases]") {
    Scratch scratch;
    const auto json = (scratch / "out.json").string();
    Outcome o = scratch.run("--workload shift --phases chat:100,documents:many --json " + json);
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("--phases 'documents:many': expected a whole number"));
    CHECK(o.out.empty());
    o = scratch.run("--workload shift --phases chat:10,videos:3");
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("unknown mix 'videos'"));
    o = scratch.run("--workload shift --requests 10");
    CHECK(o.status == 2);
    CHECK_THAT(o.err, ContainsSubstring("the shift workload's phases give their own (--phases)"));
    CHECK(scratch.entries() == 0);
}

TEST_CASE("program: a workload shift reports each phase in the table, JSON and CSV",
          "[sim][program][phases]") {
    Scratch scratch;
    const auto json = scratch / "out.json";
    const auto csv = scratch / "out.csv";
    const Outcome o =
        scratch.run("--model gpt-oss-120b --memory 12GiB --sweep 3 --workload shift --phases "
                    "chat:60,documents:6@2,chat:60 --json " +
                    json.string() + " --csv " + csv.string());
    CHECK(o.status == 0);
    CHECK(o.err.empty());
    CHECK_THAT(o.out, ContainsSubstring("workload shift: 3 phases, 126 requests"));
    CHECK_THAT(o.out, ContainsSubstring("1 chat "));
    CHECK_THAT(o.out, ContainsSubstring("2 documents "));
    CHECK_THAT(o.out, ContainsSubstring("3 chat "));
    CHECK_THAT(o.out, ContainsSubstring("fixed split, best for this phase"));
    CHECK_THAT(o.out, ContainsSubstring("best fixed split per phase (--swa-full-tokens-ratio): "
                                        "1 chat "));
    const std::string report = read_file(json);
    CHECK_THAT(report, ContainsSubstring("\"phase_oracle_indices\": ["));
    CHECK_THAT(report, ContainsSubstring("{\"phase\": 2, \"name\": \"documents\", \"description\": "
                                         "\"6 requests at 2/s, long documents"));
    CHECK_THAT(report, ContainsSubstring("\"phases\": [{\"phase\": 1, \"name\": \"chat\", "
                                         "\"completed\": "));
    const std::string table = read_file(csv);
    // Header, 4 compared and 4 swept runs, then per phase the same and the phase's best split.
    CHECK(std::count(table.begin(), table.end(), '\n') == 1 + 8 + 3 * (8 + 1));
    CHECK_THAT(table, ContainsSubstring("\nfixed_phase_oracle,fixed_split,"));
    CHECK_THAT(table, ContainsSubstring(",2,documents,,"));
}

TEST_CASE("program: the thread count reaches Kokkos under either spelling", "[sim][program]") {
    // A thread count in the environment that differs from the option is
    // overridden (Kokkos 3 aborts on a mismatch between the two).
    Scratch scratch;
    for (const std::string spelling : {"--kokkos-threads", "--kokkos-num-threads"}) {
        INFO(spelling);
        const Outcome o =
            scratch.run(spelling + "=2 --sweep 2 --requests 40 --json -", "KOKKOS_NUM_THREADS=3");
        CHECK(o.status == 0);
        CHECK(o.err.empty());
        // Host backends with threads report them; Serial has one.
        if (o.out.find("\"backend\": \"Serial") == std::string::npos)
            CHECK_THAT(o.out, ContainsSubstring("(2 threads)"));
    }
    const Outcome o = scratch.run("--sweep 2 --requests 40 --json -", "env -u KOKKOS_NUM_THREADS");
    CHECK(o.status == 0);
    CHECK_THAT(o.out, ContainsSubstring("(1 thread)"));
}

TEST_CASE("program: the tri-pool preset reports both engine ratios in the table, JSON and CSV",
          "[sim][program][tri-pool]") {
    Scratch scratch;
    const auto json = scratch / "out.json";
    const auto csv = scratch / "out.csv";
    const Outcome o =
        scratch.run("--model hymba-1.5b --memory 4GiB --sweep 2 --workload shift --phases "
                    "chat:40,documents:3,chat:40 --json " +
                    json.string() + " --csv " + csv.string());
    CHECK(o.status == 0);
    CHECK(o.err.empty());
    CHECK_THAT(o.out, ContainsSubstring("fixed split, engine default       0.90 / 0.80 (47% "
                                        "state, 11% full)"));
    CHECK_THAT(o.out, ContainsSubstring("fixed split, oracle (best of 5)"));
    CHECK_THAT(o.out, ContainsSubstring("The engine default, 0.90 / 0.80: 47% state, 42% "
                                        "sliding-window KV, 11% full KV."));
    CHECK_THAT(o.out, ContainsSubstring("fixed split, best for this phase"));
    CHECK_THAT(o.out, ContainsSubstring("best fixed split per phase (--mamba-full-memory-ratio / "
                                        "--swa-full-tokens-ratio): 1 chat "));
    const std::string report = read_file(json);
    CHECK_THAT(report, ContainsSubstring("\"kind\": \"mamba_sliding_window\""));
    CHECK_THAT(report, ContainsSubstring("\"engine_ratio_flags\": [\"--mamba-full-memory-ratio\", "
                                         "\"--swa-full-tokens-ratio\"]"));
    CHECK_THAT(report,
               ContainsSubstring("\"role\": \"fixed_default\", \"name\": \"fixed split, "
                                 "--mamba-full-memory-ratio 0.90 --swa-full-tokens-ratio "
                                 "0.80\", \"policy\": \"fixed_split\", \"full_fraction\": "));
    CHECK_THAT(report, ContainsSubstring("\"state_fraction\": null, \"mamba_full_memory_ratio\": "
                                         "null, \"swa_full_tokens_ratio\": null"));
    const std::string table = read_file(csv);
    CHECK(table.rfind("role,policy,full_fraction,state_fraction,mamba_full_memory_ratio,"
                      "swa_full_tokens_ratio,phase,phase_name,",
                      0) == 0);
    // Header, 4 compared and 5 swept runs, then per phase the same and the phase's best split.
    CHECK(std::count(table.begin(), table.end(), '\n') == 1 + 9 + 3 * (9 + 1));
    CHECK_THAT(table, ContainsSubstring(",0.9000000000000001,0.8000000000000002,all,"));
}
