// The requests a run replays: when each arrives, how long its prompt is and
// how many tokens it generates. Built in (synthetic, fixed seed) or read from
// a trace file (trace_reader.hpp).
#pragma once

#include <kvpool/types.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace kvpool::sim {

struct RequestSpec {
    double arrival_s = 0.0;
    index_t prompt_tokens = 0;
    index_t output_tokens = 0;
};

struct Workload {
    std::string name;                  // "default", "long-context", or the trace file
    std::string description;           // one line for the reports
    std::vector<RequestSpec> requests; // in arrival order
};

enum class SyntheticKind { chat, long_context };

struct SyntheticOptions {
    SyntheticKind kind = SyntheticKind::chat;
    std::size_t requests = 0;
    double arrival_rate = 0.0; // requests per simulated second (Poisson)
    std::uint64_t seed = 0;
};

// The built-in workloads' sizes when the command line gives none: enough
// requests arriving fast enough that memory, not arrivals, limits the runs.
SyntheticOptions default_synthetic_options(SyntheticKind kind);

// chat: log-normal prompt and output lengths (a chat / assistant mix).
// long_context: the chat mix with one request in six a long document
// (prompts of 8K to 128K tokens, short answers).
Workload synthetic_workload(const SyntheticOptions& options);

// Total KV tokens the requests end with (prompt + output each).
index_t total_tokens(const std::vector<RequestSpec>& requests);

} // namespace kvpool::sim
