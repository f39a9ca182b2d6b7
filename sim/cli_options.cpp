#include "cli_options.hpp"

#include "input_error.hpp"
#include "model_config.hpp"
#include "model_presets.hpp"
#include "text_lines.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdlib>
#include <limits>

namespace kvpool::sim {

namespace {

double parse_real(const std::string& option, const std::string& text, double min, double max) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < min ||
        v > max)
        throw InputError(fmt::format("{}: expected a number from {:g} to {:g}, got '{}'", option,
                                     min, max, text));
    return v;
}

std::uint64_t parse_whole(const std::string& option, const std::string& text, std::uint64_t min,
                          std::uint64_t max) {
    bool ok = !text.empty() && text.size() <= 19;
    std::uint64_t v = 0;
    for (char c : text) {
        ok = ok && c >= '0' && c <= '9';
        if (ok)
            v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (!ok || v < min || v > max)
        throw InputError(fmt::format("{}: expected a whole number from {} to {}, got '{}'", option,
                                     min, max, text));
    return v;
}

StepTimeModel parse_step_time(const std::string& option, const std::string& text) {
    const auto fields = split_commas(text);
    if (fields.size() != 3)
        throw InputError(fmt::format(
            "{}: expected MS,US,US (three numbers, e.g. 12,40,60), got '{}'", option, text));
    StepTimeModel m;
    m.overhead_s = parse_real(option + " (step overhead, ms)", fields[0], 0, 1e6) * 1e-3;
    m.per_prefill_token_s =
        parse_real(option + " (per prefilled token, us)", fields[1], 0, 1e6) * 1e-6;
    m.per_decode_token_s =
        parse_real(option + " (per decoded token, us)", fields[2], 0, 1e6) * 1e-6;
    if (m.step_seconds(1, 1) <= 0)
        throw InputError(fmt::format("{}: a step must take some time, got '{}'", option, text));
    return m;
}

// MIX:REQUESTS[@RATE],... e.g. chat:600,documents:120@5,chat:600.
std::vector<PhaseSpec> parse_phases(const std::string& option, const std::string& text) {
    std::vector<PhaseSpec> phases;
    for (const std::string& item : split_commas(text)) {
        const std::string where = fmt::format("{} '{}'", option, item);
        const auto colon = item.find(':');
        if (colon == std::string::npos)
            throw InputError(fmt::format(
                "{}: expected MIX:REQUESTS[@RATE] (e.g. chat:600 or documents:120@5) in '{}'",
                where, text));
        const auto kind = mix_from_name(item.substr(0, colon));
        if (!kind)
            throw InputError(
                fmt::format("{}: unknown mix '{}' (expected chat, long-context or documents)",
                            where, item.substr(0, colon)));
        const auto at = item.find('@', colon);
        PhaseSpec phase{*kind, 0, default_arrival_rate(*kind)};
        phase.requests = parse_whole(where, item.substr(colon + 1, at - colon - 1), 1, 10'000'000);
        if (at != std::string::npos)
            phase.arrival_rate = parse_real(where, item.substr(at + 1), 1e-6, 1e9);
        phases.push_back(phase);
    }
    if (phases.size() > max_phases)
        throw InputError(
            fmt::format("{}: at most {} phases, got {}", option, max_phases, phases.size()));
    return phases;
}

} // namespace

CliOptions parse_cli(const std::vector<std::string>& args) {
    CliOptions o;
    for (std::size_t i = 0; i < args.size(); ++i) {
        std::string option = args[i];
        std::optional<std::string> attached; // --option=value
        if (const auto eq = option.find('=');
            option.rfind("--", 0) == 0 && eq != std::string::npos) {
            attached = option.substr(eq + 1);
            option = option.substr(0, eq);
        }
        const auto value = [&]() -> std::string {
            if (attached)
                return *attached;
            if (i + 1 >= args.size())
                throw InputError(fmt::format("{} needs a value (see --help)", option));
            return args[++i];
        };
        const auto flag = [&] {
            if (attached)
                throw InputError(fmt::format("{} takes no value, got '{}'", option, *attached));
        };
        if (option == "-h" || option == "--help") {
            flag();
            o.help = true;
        } else if (option == "--kokkos-threads" || option == "--kokkos-num-threads") {
            // Kokkos 3 knows only the first spelling, Kokkos 4 only the second:
            // the count reaches Kokkos through KOKKOS_NUM_THREADS, which both read.
            o.kokkos_threads = static_cast<int>(parse_whole(option, value(), 1, 4096));
        } else if (option.rfind("--kokkos-", 0) == 0) {
            o.kokkos_args.push_back(args[i]);
        } else if (option == "--model") {
            o.model = value();
        } else if (option == "--memory") {
            o.memory = value();
        } else if (option == "--page-size") {
            o.page_size = static_cast<index_t>(parse_whole(option, value(), 1, 4096));
        } else if (option == "--swa-page-size") {
            o.swa_page_size = static_cast<index_t>(parse_whole(option, value(), 1, 4096));
        } else if (option == "--workload") {
            o.workload = value();
        } else if (option == "--phases") {
            o.phases = parse_phases(option, value());
        } else if (option == "--requests") {
            o.requests = parse_whole(option, value(), 1, 10'000'000);
        } else if (option == "--rate") {
            o.rate = parse_real(option, value(), 1e-6, 1e9);
        } else if (option == "--seed") {
            o.seed =
                parse_whole(option, value(), 0, std::numeric_limits<std::uint64_t>::max() / 10);
        } else if (option == "--decode-reserve") {
            o.scheduler.decode_reserve = parse_real(option, value(), 0, 1);
        } else if (option == "--max-prefill-tokens") {
            o.scheduler.max_prefill_tokens =
                static_cast<index_t>(parse_whole(option, value(), 1, 1u << 30));
        } else if (option == "--max-running") {
            o.scheduler.max_running =
                static_cast<std::size_t>(parse_whole(option, value(), 1, 1u << 30));
        } else if (option == "--step-time") {
            o.step_time = parse_step_time(option, value());
        } else if (option == "--swa-full-tokens-ratio") {
            o.swa_full_tokens_ratio = parse_real(option, value(), 1e-3, 1e3);
        } else if (option == "--mamba-full-memory-ratio") {
            o.mamba_full_memory_ratio = parse_real(option, value(), 1e-3, 1e3);
        } else if (option == "--context-length") {
            o.context_length = static_cast<index_t>(parse_whole(option, value(), 1, 1u << 24));
        } else if (option == "--sweep") {
            o.sweep_points = parse_whole(option, value(), 1, 999);
        } else if (option == "--device") {
            flag();
            o.backend = Backend::device;
        } else if (option == "--no-prefix-cache") {
            flag();
            o.no_prefix_cache = true;
        } else if (option == "--full-size-buffer") {
            flag();
            o.full_size_buffer = true;
        } else if (option == "--json") {
            o.json_path = value();
        } else if (option == "--csv") {
            o.csv_path = value();
        } else if (option == "--plot") {
            o.plot_path = value();
        } else if (option == "--no-progress") {
            flag();
            o.progress = false;
        } else {
            throw InputError(fmt::format("unknown option '{}' (see --help)", args[i]));
        }
    }
    if (o.json_path && o.csv_path && *o.json_path == "-" && *o.csv_path == "-")
        throw InputError("--json - and --csv - both ask for stdout: send one of them to a file");
    if (o.plot_path && *o.plot_path == "-")
        throw InputError("--plot needs a file name, not '-'");
    if (o.phases && o.workload != "shift")
        throw InputError(
            fmt::format("--phases gives the phases of --workload shift, not of '{}'", o.workload));
    if (o.workload == "shift" && (o.requests || o.rate))
        throw InputError("--requests and --rate shape the default and long-context workloads; the "
                         "shift workload's phases give their own (--phases)");
    return o;
}

std::string help_text() {
    return fmt::format(
        R"(kvpool-sim: how many more requests fit when a hybrid model's kinds of GPU state
share one unified pool instead of a fixed split?

Replays a workload through a continuous-batching scheduler model on the real kvpool
allocators and compares, in one run:
  unified pool, eager compaction   one buffer, the sides grow toward each other
  unified pool, lazy compaction    the same, but frees leave holes that later allocations
                                   reuse; pages move only when a side runs short
  fixed split, engine default      each side capped at a fixed share (SGLang's default ratio;
                                   both of its ratios for a model with full-attention,
                                   sliding-window and Mamba layers)
  fixed split, oracle              the best fixed share found by a sweep (the most a user
                                   could get by tuning the ratio by hand for this workload)

Usage: kvpool-sim [options]

Examples:
  kvpool-sim                                      the built-in default (Gemma-3-27B-like, 64 GiB)
  kvpool-sim --model qwen3-next-80b --workload long-context
  kvpool-sim --workload trace.csv --memory 40GiB --json out.json --plot running.png

Model and memory:
  --model NAME|FILE       a preset ({presets}; default gemma3-27b)
                          or a model file (format below)
  --memory SIZE           KV memory, e.g. 64GiB or 80GB (default: the model's kv_memory)
  --page-size N           tokens per KV page (default 16)
  --swa-page-size N       tokens per page of the sliding-window side, a divisor of the page
                          size (default: the page size): each full page then binds page/N
                          window pages and the window is released N tokens at a time. The
                          unified pool and the fixed splits get the same N (an engine with a
                          fixed split could page its window finer too), on the SWA pair and
                          on the tri-pool (Mamba and sliding-window layers) alike

Workload:
  --workload default|long-context|shift|multi-turn|FILE
                          default: synthetic chat mix, log-normal prompt and output lengths,
                            Poisson arrivals fast enough that memory is the limit
                          long-context: the same with one request in six a long document
                          shift: phases with different mixes in one run (--phases), reported
                            per phase as well as overall
                          multi-turn: sessions of turns sharing prefixes, half chat
                            (shared system prompts), half agents (shared tool descriptions);
                            each turn's prompt holds the session so far (prefix cache below)
                          FILE: a trace, .csv or .jsonl (format below)
  --requests N            requests of default or long-context (default 1500; long-context 600);
                          sessions of multi-turn (default 200)
  --rate R                their arrivals per simulated second (default 50; long-context 10;
                          multi-turn: session starts, default 4)
  --phases MIX:N[@R],...  the phases of shift, in order: a mix (chat, long-context or
                          documents: every request a long document), its requests and their
                          arrivals per second (default rates 50, 10, 5)
                          (default chat:600,documents:120,chat:600)
  --seed S                their random seed (default 1: every run sees the same requests)

Prefix cache (workloads whose requests carry prefix block hashes: multi-turn, and JSONL
traces with hash_ids): finished requests leave their prompt's full blocks in a radix cache
that new requests share instead of prefilling them (full-attention KV; for sliding-window
layers the window before each cached end; a Mamba state per cached end), evicted least
recently used when memory is short: on the unified pool whole blocks whichever side is
short, on a fixed split only what the short side holds.
  --no-prefix-cache       run without it

Scheduler model:
  --decode-reserve F      share of the running requests' future tokens admission keeps free
                          (default 0.1, the floor of SGLang's new_token_ratio;
                          0 admits while the prompt fits)
  --max-prefill-tokens N  prefill tokens per step (default 16384, as SGLang)
  --max-running N         requests running at once at most (default: as many as memory allows)
  --step-time MS,US,US    simulated step time: overhead per step (ms), per prefilled token (us),
                          per decoded token (us) (default: the model file's estimates for one
                          H200, or 12,40,60)

Comparison:
  --swa-full-tokens-ratio R, --mamba-full-memory-ratio M
                          your own fixed split, by SGLang's flags (the model's; one left out
                          keeps its default), compared in place of the engine default. A split
                          whose side cannot hold the longest request (or --context-length)
                          exits with status 2 naming the side
  --context-length N      the longest request (tokens) the pool, and your split, must hold
                          besides the workload's (default: the workload's longest)
  --sweep N               fixed shares swept for the oracle, besides the default (default 19);
                          with both ratios (kind = mamba_sliding_window), N per ratio: an
                          N x N grid (default 5)
  --device                run the allocators on Kokkos' default execution space (the GPU of
                          a CUDA build) instead of the host
  --kokkos-threads=N      host threads for the allocators' kernels (default 1: they are small;
                          --kokkos-num-threads=N is the same); other --kokkos-* options are
                          passed on to Kokkos
  --full-size-buffer      allocate the real KV bytes. By default every size is divided by the
                          greatest common divisor of the entry sizes: the same pages fit and
                          every allocator decision is the same, but page copies are smaller

Output (written only when every run has finished):
  --json FILE             all results as JSON ("-": to stdout instead of the table)
  --csv FILE              one row per run, the sweep included ("-": to stdout)
  --plot FILE.png         running requests and time to first token over time per policy
                          (needs gnuplot: apt-get install gnuplot-nox)
  --no-progress           no progress bar (it is only drawn when stderr is a terminal)
  -h, --help              this text

Columns of the table:
  running avg, peak       requests holding KV, averaged over simulated time, and at most
  completed requests      requests finished (of all, when some could not run at all)
  completed per s         completed requests per simulated second (step-time model above)
  vs default              completed per s relative to the fixed split at the engine default
  retractions             requests retracted because decode ran out of memory
  moved per step          pages, and MiB in the model's real bytes, moved by compaction
  alloc us per step       wall time spent inside allocator calls per step, measured
  prefix hits             with a prefix cache: tokens taken from it over tokens admitted
The latency table: percentiles (p50, p90, p99, nearest rank) over requests of the time to
first token (TTFT: arrival to the end of the step that prefilled the request), of the gaps
between a request's tokens (ITL: one per decode step; a retraction's gap lasts until the
request decodes again) and of the time queued (arrival to first admission).
A workload with phases (shift, or a trace with a phase column) adds a per-phase table: each
policy, and the fixed split best for that phase alone, on the phase's own requests (completed,
retractions) over its share of the simulated time (each step's time split by what the requests
of each phase cost in it; idle time to the phase awaited).

Trace files (one request per line; blank lines and lines starting with # are skipped):
  CSV:   arrival_s,prompt_tokens,output_tokens     (header optional, columns in any order,
                                                   other columns ignored)
         0.00,812,64
  JSONL: {{"arrival_s": 0.0, "prompt_tokens": 812, "output_tokens": 64}}
         or the Mooncake traces' format, read as it is (a JSONL timestamp is in ms):
         {{"timestamp": 0, "input_length": 812, "output_length": 64, "hash_ids": [0]}}
         hash_ids: one hash per 512-token block of the prompt (equal hashes, equal prefixes)
  An optional column (or member) phase labels each request's phase, e.g. chat or documents:
  consecutive requests in arrival order with one label form a phase, reported apart.

Model files (key = value, # comments; see sim/models/*.conf):
{keys}
Exit status: 0 done, 2 bad input (message names the option, file line or value) or a
configuration that cannot run (memory or your split too small for the longest request),
1 internal error.
)",
        fmt::arg("presets", fmt::join(model_preset_names(), ", ")),
        fmt::arg("keys", model_file_keys_help()));
}

} // namespace kvpool::sim
