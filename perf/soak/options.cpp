#include "options.hpp"

#include <random>

namespace kvpool::soak {

namespace {

index_t positive(const std::string& option, const std::string& value) {
    std::size_t used = 0;
    long long n = 0;
    try {
        n = std::stoll(value, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != value.size() || n <= 0)
        throw UsageError(option + ": expected a positive integer, got '" + value + "'");
    return n;
}

} // namespace

SoakOptions parse_options(const std::vector<std::string>& args) {
    SoakOptions o;
    bool seeded = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& name = args[i];
        if (name == "--help" || name == "-h") {
            o.help = true;
            continue;
        }
        if (name.rfind("--kokkos-", 0) == 0)
            continue; // Kokkos' own, read by Kokkos::initialize
        if (i + 1 >= args.size())
            throw UsageError(name + ": unknown option or no value");
        const std::string& value = args[++i];
        if (name == "--pair") {
            if (value != "swa" && value != "mamba")
                throw UsageError("--pair: expected swa or mamba, got '" + value + "'");
            o.pair = value;
        } else if (name == "--ops") {
            o.ops = positive(name, value);
        } else if (name == "--tokens") {
            o.tokens_per_side = positive(name, value);
        } else if (name == "--page-size") {
            o.page_size = positive(name, value);
            if (o.page_size != 1 && o.page_size != 16)
                throw UsageError("--page-size: expected 1 or 16, got '" + value + "'");
        } else if (name == "--mode") {
            if (value != "eager" && value != "lazy")
                throw UsageError("--mode: expected eager or lazy, got '" + value + "'");
            o.mode = value == "eager" ? CompactionMode::eager : CompactionMode::lazy;
        } else if (name == "--seed") {
            o.seed = static_cast<std::uint64_t>(positive(name, value));
            seeded = true;
        } else if (name == "--check-every") {
            o.check_every = positive(name, value);
        } else if (name == "--memory-tolerance-mib") {
            o.memory_tolerance_bytes = positive(name, value) << 20;
        } else {
            throw UsageError(name + ": unknown option");
        }
    }
    if (o.tokens_per_side < 64 * o.page_size)
        throw UsageError("--tokens: at least 64 pages per side (" +
                         std::to_string(64 * o.page_size) + " tokens at page size " +
                         std::to_string(o.page_size) + ")");
    if (!seeded) {
        std::random_device entropy;
        o.seed = entropy() % 1'000'000'000 + 1;
    }
    return o;
}

std::string help_text() {
    return R"(usage: kvpool-soak [options]

Drives a pair at the peer's geometry with a seeded scheduler: the SWA pair (32 layers x 8 heads x
128 bf16, K and V: 128 KiB per token per side) or the Mamba pair (8 such layers, 32 KiB per token,
and 640 state slots of 25 MiB, shrunk with --tokens). Prefill batches, decode steps, finished
requests and sliding-window releases, forward events, opportunistic flushes; out of room, it
waits or retracts the newest request.
Checks the invariants and the stamped KV data every --check-every operations and at the end,
host and device memory after warm-up against the end, and every counter after teardown.
Prints a summary and one JSON line; exits 1 on any failure, 2 on bad usage.

  --pair swa|mamba          (default swa)
  --ops N                   allocator operations (default 1000000)
  --tokens N                tokens per side (default 262144: a 64 GiB buffer)
  --page-size 1|16          (default 16)
  --mode eager|lazy         compaction (default lazy)
  --seed N                  (default: drawn, and printed)
  --check-every N           operations between checks (default 10000)
  --memory-tolerance-mib N  growth allowed after warm-up (default 64)
Kokkos' own options (--kokkos-num-threads=N) go to Kokkos.
)";
}

const char* mode_name(CompactionMode mode) {
    return mode == CompactionMode::eager ? "eager" : "lazy";
}

} // namespace kvpool::soak
