// The simulator's inputs: model files and presets, traces, byte sizes and the
// command line. Bad input must name the file line or the value.
#include "byte_size.hpp"
#include "cli_options.hpp"
#include "input_error.hpp"
#include "model_config.hpp"
#include "model_presets.hpp"
#include "pool_plan.hpp"
#include "sim_test_support.hpp"
#include "trace_reader.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

using namespace kvpool;
using namespace kvpool::sim;
using Catch::Matchers::ContainsSubstring;
using kvpool::sim::test::input_error_of;

namespace {

const char* const swa_model = R"(# a test model
name = tiny
kind = sliding_window
kv_dtype_bytes = 2
kv_heads = 4
head_dim = 8
full_attention_layers = 1
sliding_window_layers = 3
sliding_window = 64
kv_memory = 1MiB
)";

// Full-attention, sliding-window and Mamba layers: the union of both kinds' keys.
const char* const tri_model = R"(name = tiny-tri
kind = mamba_sliding_window
kv_dtype_bytes = 2
kv_heads = 4
head_dim = 8
full_attention_layers = 1
sliding_window_layers = 3
sliding_window = 64
mamba_layers = 2
conv_state_elements = 10
conv_state_dtype_bytes = 2
temporal_state_elements = 100
temporal_state_dtype_bytes = 4
kv_memory = 1MiB
)";

std::string with_line(const std::string& text, const std::string& line) {
    return text + line + "\n";
}

} // namespace

TEST_CASE("presets carry the cited configurations", "[sim][inputs]") {
    CHECK(model_preset_names() ==
          std::vector<std::string>{"gemma3-27b", "gpt-oss-120b", "hymba-1.5b", "qwen3-next-80b"});
    const ModelConfig gemma = load_model("gemma3-27b");
    CHECK(gemma.kind == HybridKind::sliding_window);
    CHECK(gemma.full_token_bytes() == 10 * 8192);
    CHECK(gemma.window_token_bytes() == 52 * 8192);
    CHECK(gemma.sliding_window == 1024);
    CHECK(gemma.step_time.has_value());
    const ModelConfig oss = load_model("gpt-oss-120b");
    CHECK(oss.full_token_bytes() == 18 * 2048);
    CHECK(oss.window_token_bytes() == 18 * 2048);
    CHECK(oss.sliding_window == 128);
    const ModelConfig qwen = load_model("qwen3-next-80b");
    CHECK(qwen.kind == HybridKind::mamba);
    CHECK(qwen.full_token_bytes() == 24576);
    CHECK(qwen.state_slot_bytes() == 36 * (24576 * 2 + 524288 * 4));
    const ModelConfig hymba = load_model("hymba-1.5b");
    CHECK(hymba.kind == HybridKind::mamba_sliding_window);
    CHECK(hymba.full_token_bytes() == 3 * 1920);
    CHECK(hymba.window_token_bytes() == 14 * 1920);
    CHECK(hymba.state_slot_bytes() == 32 * (9600 * 2 + 51200 * 4));
    CHECK(hymba.sliding_window == 1024);
    CHECK(hymba.step_time.has_value());
    // SGLang's default ratios as byte shares of the full side.
    CHECK(std::abs(fixed_split_at(qwen, {0.9}).full_fraction - 1.0 / 1.9) < 1e-12);
    CHECK(std::abs(engine_ratios_of(gemma, fixed_split_at(gemma, {0.8}))[0] - 0.8) < 1e-12);
}

TEST_CASE("a model file with full-attention, sliding-window and Mamba layers", "[sim][inputs]") {
    const ModelConfig m = parse_model_config(tri_model, "tri.conf");
    CHECK(m.kind == HybridKind::mamba_sliding_window);
    CHECK(m.has_sliding_window());
    CHECK(m.has_state_slots());
    CHECK(m.full_token_bytes() == 1 * 2 * 4 * 8 * 2);
    CHECK(m.window_token_bytes() == 3 * 2 * 4 * 8 * 2);
    CHECK(m.state_slot_bytes() == 2 * (10 * 2 + 100 * 4));
    CHECK(m.sliding_window == 64);
    CHECK(to_string(m.kind) == std::string("mamba_sliding_window"));
    CHECK_FALSE(parse_model_config(swa_model, "swa.conf").has_state_slots());
}

TEST_CASE("a custom model file", "[sim][inputs]") {
    const ModelConfig m = parse_model_config(swa_model, "tiny.conf");
    CHECK(m.name == "tiny");
    CHECK(m.description == "tiny");
    CHECK(m.full_token_bytes() == 1 * 2 * 4 * 8 * 2);
    CHECK(m.window_token_bytes() == 3 * 2 * 4 * 8 * 2);
    CHECK(m.kv_memory_bytes == 1 << 20);
    CHECK_FALSE(m.step_time.has_value());
    const ModelConfig timed =
        parse_model_config(with_line(with_line(with_line(swa_model, "step_overhead_ms = 2"),
                                               "prefill_us_per_token = 5"),
                                     "decode_us_per_token = 7.5"),
                           "tiny.conf");
    REQUIRE(timed.step_time.has_value());
    CHECK(timed.step_time->step_seconds(2, 4) == 2e-3 + 2 * 5e-6 + 4 * 7.5e-6);
}

TEST_CASE("bad model files are named by line and value", "[sim][inputs]") {
    const auto error_of = [](const std::string& text) {
        try {
            parse_model_config(text, "m.conf");
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK_THAT(error_of(with_line(swa_model, "layres = 3")),
               ContainsSubstring("m.conf:11: unknown key 'layres'"));
    CHECK_THAT(error_of(with_line(swa_model, "kv_heads = 9")),
               ContainsSubstring("m.conf:11: 'kv_heads' given twice (first on line 5)"));
    CHECK_THAT(error_of(with_line(swa_model, "mamba_layers = 3")),
               ContainsSubstring("m.conf:11: 'mamba_layers' belongs to kind = mamba and "
                                 "mamba_sliding_window models, not kind = sliding_window"));
    CHECK_THAT(error_of(with_line(swa_model, "this is not a pair")),
               ContainsSubstring("m.conf:11: expected 'key = value'"));
    std::string no_window = swa_model;
    no_window.replace(no_window.find("sliding_window = 64"), 19, "sliding_window = -64");
    CHECK_THAT(error_of(no_window),
               ContainsSubstring("m.conf:9: sliding_window must be a whole number"));
    std::string missing = swa_model;
    missing.replace(missing.find("head_dim = 8\n"), 13, "");
    CHECK_THAT(error_of(missing), ContainsSubstring("m.conf: missing 'head_dim'"));
    CHECK_THAT(error_of(with_line(swa_model, "decode_us_per_token = 3")),
               ContainsSubstring("missing 'step_overhead_ms'"));
    CHECK_THROWS_WITH(load_model("no-such-model"),
                      ContainsSubstring("unknown model 'no-such-model'"));
    std::string bad_kind = swa_model;
    bad_kind.replace(bad_kind.find("kind = sliding_window"), 21, "kind = hybrid");
    CHECK_THAT(error_of(bad_kind),
               ContainsSubstring("m.conf:3: kind must be sliding_window, mamba or "
                                 "mamba_sliding_window, got 'hybrid'"));
}

TEST_CASE("a model file with both kinds of layers needs both kinds' keys", "[sim][inputs]") {
    const auto error_of = [](const std::string& text) {
        return input_error_of([&] { parse_model_config(text, "tri.conf"); });
    };
    const auto without = [](std::string text, const std::string& line) {
        text.replace(text.find(line), line.size() + 1, "");
        return text;
    };
    CHECK_THAT(error_of(without(tri_model, "mamba_layers = 2")),
               ContainsSubstring("tri.conf: missing 'mamba_layers' (layers with recurrent state; "
                                 "required for kind = mamba_sliding_window)"));
    CHECK_THAT(error_of(without(tri_model, "sliding_window = 64")),
               ContainsSubstring("tri.conf: missing 'sliding_window' (window length in tokens; "
                                 "required for kind = mamba_sliding_window)"));
    CHECK_THAT(error_of(without(tri_model, "temporal_state_dtype_bytes = 4")),
               ContainsSubstring("missing 'temporal_state_dtype_bytes'"));
    std::string zero_window = tri_model;
    zero_window.replace(zero_window.find("sliding_window_layers = 3"), 25,
                        "sliding_window_layers = 0");
    CHECK_THAT(error_of(zero_window),
               ContainsSubstring("tri.conf:7: sliding_window_layers must be a whole number from 1 "
                                 "to 4294967296, got '0'"));
    CHECK_THAT(error_of(with_line(tri_model, "conv_state_elements = 3")),
               ContainsSubstring("tri.conf:15: 'conv_state_elements' given twice (first on line "
                                 "10)"));
}

TEST_CASE("traces in CSV and JSONL", "[sim][inputs]") {
    const Workload csv = parse_trace("prompt_tokens,arrival_s,output_tokens,user\n"
                                     "# a comment\n"
                                     "100, 0.5, 10, alice\n"
                                     "\n"
                                     "20,0.25,3,bob\r\n",
                                     "t.csv", TraceFormat::csv);
    REQUIRE(csv.requests.size() == 2);
    CHECK(csv.requests[0].arrival_s == 0.25); // sorted by arrival
    CHECK(csv.requests[0].prompt_tokens == 20);
    CHECK(csv.requests[1].output_tokens == 10);

    const Workload bare = parse_trace("0,5,6\n1.5,7,8\n", "t.csv", TraceFormat::csv);
    REQUIRE(bare.requests.size() == 2);
    CHECK(bare.requests[1].prompt_tokens == 7);

    const Workload jsonl = parse_trace(
        R"({"arrival_s": 0.1, "prompt_tokens": 812, "output_tokens": 64, "tag": {"a": [1, "x"]}}
{"output_tokens": 2, "prompt_tokens": 1, "arrival_s": 0})",
        "t.jsonl", TraceFormat::jsonl);
    REQUIRE(jsonl.requests.size() == 2);
    CHECK(jsonl.requests[1].prompt_tokens == 812);
    CHECK(detect_trace_format("x.trace", " {\"a\": 1}") == TraceFormat::jsonl);
    CHECK(detect_trace_format("x.jsonl", "0,1,2") == TraceFormat::jsonl);
    CHECK(detect_trace_format("x.csv", "{") == TraceFormat::csv);
}

TEST_CASE("a trace in the Mooncake format: milliseconds and prefix hashes", "[sim][inputs]") {
    const Workload w = parse_trace(
        R"({"timestamp": 0, "input_length": 1100, "output_length": 6, "hash_ids": [0, 1, 2]}
{"timestamp": 1500, "input_length": 1024, "output_length": 4, "hash_ids": [0, 1]}
{"timestamp": 250, "input_length": 10, "output_length": 3, "hash_ids": []})",
        "m.jsonl", TraceFormat::jsonl);
    REQUIRE(w.requests.size() == 3);
    CHECK(w.block_tokens == 512);
    CHECK(w.requests[1].arrival_s == 0.25);
    CHECK(w.requests[2].arrival_s == 1.5);
    CHECK(w.requests[0].prompt_tokens == 1100);
    CHECK(w.requests[0].prefix_blocks == std::vector<std::uint64_t>{0, 1, 2});
    CHECK(w.requests[1].prefix_blocks.empty());
    CHECK_THAT(w.description, ContainsSubstring("prefix hashes of 512-token blocks"));
    // Without hash_ids, no prefix cache: the block size stays 0.
    CHECK(parse_trace(R"({"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1})", "a.jsonl",
                      TraceFormat::jsonl)
              .block_tokens == 0);

    const auto error_of = [](const std::string& text) {
        return input_error_of([&] { parse_trace(text, "m", TraceFormat::jsonl); });
    };
    const std::string good =
        R"({"timestamp": 0, "input_length": 600, "output_length": 6, "hash_ids": [7, 8]})"
        "\n";
    CHECK_THAT(error_of(good + R"({"timestamp": 9, "input_length": 6, "output_length": 6,)"
                               R"( "hash_ids": [1, -2]})"),
               ContainsSubstring("m:2: 'hash_ids' must be a list of whole numbers >= 0, got [1, "
                                 "-2]"));
    CHECK_THAT(error_of(good + R"({"timestamp": 9, "input_length": 6, "output_length": 6,)"
                               R"( "hash_ids": "0 1"})"),
               ContainsSubstring("m:2: 'hash_ids' must be a list"));
    CHECK_THAT(error_of(R"({"timestamp": 9, "input_length": 513, "output_length": 6,)"
                        R"( "hash_ids": [1, 2, 3]})"),
               ContainsSubstring("m:1: 'hash_ids' lists 3 blocks of 512 tokens, more than the 513 "
                                 "prompt tokens fill (2)"));
    CHECK_THAT(error_of(good + R"({"timestamp": 9, "input_length": 6, "output_length": 6})"),
               ContainsSubstring("m:2: 'hash_ids' is given on some lines and not on others"));
}

TEST_CASE("malformed trace lines are named", "[sim][inputs]") {
    const auto error_of = [](const std::string& text, TraceFormat format) {
        try {
            parse_trace(text, "bad", format);
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const auto csv = TraceFormat::csv;
    const auto jsonl = TraceFormat::jsonl;
    CHECK_THAT(error_of("0,10,5\n0.5,ten,5\n", csv),
               ContainsSubstring(
                   "bad:2: prompt_tokens must be a whole number from 1 to 16777216, got 'ten'"));
    CHECK_THAT(error_of("0,10,5\n1,10\n", csv),
               ContainsSubstring("bad:2: expected 3 comma-separated fields, found 2"));
    CHECK_THAT(error_of("0,10,0\n", csv),
               ContainsSubstring("bad:1: output_tokens must be a whole number"));
    CHECK_THAT(error_of("-1,10,5\n", csv),
               ContainsSubstring("bad:1: arrival_s must be a number of seconds >= 0"));
    CHECK_THAT(error_of("0,2.5,5\n", csv), ContainsSubstring("got '2.5'"));
    CHECK_THAT(
        error_of("arrival_s,prompt,output_tokens\n", csv),
        ContainsSubstring(
            "bad:1: the header 'arrival_s,prompt,output_tokens' has no column 'prompt_tokens'"));
    CHECK_THAT(error_of("# nothing\n\n", csv),
               ContainsSubstring("bad: the trace holds no requests"));
    CHECK_THAT(error_of("{\"arrival_s\": 0, \"prompt_tokens\": 3}\n", jsonl),
               ContainsSubstring("bad:1: missing 'output_tokens'"));
    CHECK_THAT(
        error_of(
            "{\"arrival_s\": 0, \"prompt_tokens\": 3, \"output_tokens\": 1}\n{\"arrival_s\": 0,\n",
            jsonl),
        ContainsSubstring("bad:2: not a JSON object"));
    CHECK_THAT(
        error_of("{\"arrival_s\": 0, \"prompt_tokens\": \"3\", \"output_tokens\": 1}\n", jsonl),
        ContainsSubstring("bad:1: 'prompt_tokens' must be a number, got \"3\""));
    CHECK_THAT(error_of("[1, 2, 3]\n", jsonl),
               ContainsSubstring("bad:1: not a JSON object: column 1"));
    CHECK_THROWS_WITH(read_trace("/nonexistent/trace.csv"),
                      ContainsSubstring("cannot open the trace file"));
}

TEST_CASE("byte sizes", "[sim][inputs]") {
    CHECK(parse_byte_size("64GiB", "m") == index_t(64) << 30);
    CHECK(parse_byte_size("80GB", "m") == 80'000'000'000);
    CHECK(parse_byte_size("1.5 MiB", "m") == 3 << 19);
    CHECK(parse_byte_size("4096", "m") == 4096);
    CHECK_THROWS_WITH(parse_byte_size("lots", "--memory"),
                      ContainsSubstring("--memory: 'lots' is not a byte size"));
    CHECK_THROWS_WITH(parse_byte_size("12XB", "--memory"), ContainsSubstring("'12XB'"));
    CHECK(format_bytes(64.0 * (1 << 30)) == "64.0 GiB");
    CHECK(format_bytes(12) == "12 B");
}

TEST_CASE("command line", "[sim][inputs]") {
    const CliOptions o =
        parse_cli({"--model", "qwen3-next-80b", "--memory=40GiB", "--step-time", "10,20,30",
                   "--json", "-", "--kokkos-threads=2", "--sweep", "5"});
    CHECK(o.model == "qwen3-next-80b");
    CHECK(o.memory == std::optional<std::string>("40GiB"));
    REQUIRE(o.step_time.has_value());
    CHECK(o.step_time->overhead_s == 10e-3);
    CHECK(o.json_path == std::optional<std::string>("-"));
    CHECK(o.kokkos_threads == 2);
    CHECK(o.sweep_points == 5);
    CHECK_THROWS_WITH(parse_cli({"--frobnicate"}),
                      ContainsSubstring("unknown option '--frobnicate'"));
    CHECK_THROWS_WITH(parse_cli({"--page-size", "0"}),
                      ContainsSubstring("--page-size: expected a whole number"));
    CHECK_THROWS_WITH(parse_cli({"--memory"}), ContainsSubstring("--memory needs a value"));
    CHECK_THROWS_WITH(parse_cli({"--step-time", "1,2"}), ContainsSubstring("expected MS,US,US"));
    CHECK_THROWS_WITH(parse_cli({"--json", "-", "--csv", "-"}),
                      ContainsSubstring("both ask for stdout"));
    CHECK_THAT(help_text(),
               ContainsSubstring("--workload default|long-context|shift|multi-turn|FILE"));
}

TEST_CASE("command line: both spellings of the thread count, on every Kokkos version",
          "[sim][inputs]") {
    // Kokkos 3 reads only --kokkos-threads, Kokkos 4 only --kokkos-num-threads:
    // the simulator takes either and hands the count on itself, not as an option.
    for (const char* spelling : {"--kokkos-threads", "--kokkos-num-threads"}) {
        INFO(spelling);
        CliOptions o = parse_cli({std::string(spelling) + "=3", "--kokkos-disable-warnings"});
        CHECK(o.kokkos_threads == 3);
        CHECK(o.kokkos_args == std::vector<std::string>{"--kokkos-disable-warnings"});
        o = parse_cli({spelling, "4"});
        CHECK(o.kokkos_threads == 4);
        CHECK(o.kokkos_args.empty());
        CHECK_THROWS_WITH(parse_cli({std::string(spelling) + "=0"}),
                          ContainsSubstring(std::string(spelling) + ": expected a whole number"));
    }
    CHECK_FALSE(parse_cli({}).kokkos_threads.has_value());
}

TEST_CASE("memory too small for one request is refused", "[sim][inputs]") {
    const ModelConfig gemma = load_model("gemma3-27b");
    const std::vector<RequestSpec> requests{{0.0, 100000, 10}};
    PoolGeometry geometry{index_t(8) << 30, 16, false};
    CHECK_THROWS_WITH(
        check_memory_holds(gemma, geometry, requests),
        ContainsSubstring(
            "--memory 8.0 GiB is too small: request 1 (arrival 0.000 s, 100000 prompt"));
    geometry.memory_bytes = 1 << 20;
    CHECK_THROWS_WITH(check_memory_holds(gemma, geometry, requests),
                      ContainsSubstring("does not hold one page of each side"));
    geometry.memory_bytes = index_t(64) << 30;
    CHECK_NOTHROW(check_memory_holds(gemma, geometry, requests));
}
