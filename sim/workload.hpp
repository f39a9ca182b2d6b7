// The requests a run replays: when each arrives, how long its prompt is and
// how many tokens it generates, and the phase of the workload it belongs to.
// Built in (synthetic, fixed seed) or read from a trace file (trace_reader.hpp).
#pragma once

#include <kvpool/types.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvpool::sim {

struct RequestSpec {
    double arrival_s = 0.0;
    index_t prompt_tokens = 0;
    index_t output_tokens = 0;
    std::size_t phase = 0; // index into Workload::phases
    // Hashes of the prompt's blocks of Workload::block_tokens tokens (equal
    // hashes: equal prefixes, whose KV the prefix cache shares); empty: none.
    std::vector<std::uint64_t> prefix_blocks{};
    bool prefix_blocks_given = false; // a trace line listed them (perhaps none)
};

// A stretch of the workload with its own mix of requests (chat, then long
// documents, ...): a run of consecutive requests in arrival order.
struct WorkloadPhase {
    std::string name;        // "chat", "documents", or a trace's phase label
    std::string description; // one line for the reports
    std::size_t first_request = 0;
    std::size_t requests = 0;
};

struct Workload {
    std::string name;                  // "default", "long-context", "shift", or the trace file
    std::string description;           // one line for the reports
    std::vector<RequestSpec> requests; // in arrival order
    // They partition the requests, in order; a workload without phases has one.
    std::vector<WorkloadPhase> phases;
    // Tokens per prefix block hash (the Mooncake traces': 512); 0: the
    // requests carry no hashes and runs have no prefix cache.
    index_t block_tokens = 0;
};

// The mixes of requests the built-in workloads draw from.
enum class SyntheticKind { chat, long_context, documents };

// "chat", "long-context", "documents"; and back (nullopt for another name).
const char* mix_name(SyntheticKind kind);
std::optional<SyntheticKind> mix_from_name(const std::string& name);

// Arrivals per simulated second that keep memory, not arrivals, the limit.
double default_arrival_rate(SyntheticKind kind);

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
// documents: every request a long document.
Workload synthetic_workload(const SyntheticOptions& options);

// One phase of a workload shift: its mix, how many requests, how fast they arrive.
struct PhaseSpec {
    SyntheticKind kind = SyntheticKind::chat;
    std::size_t requests = 0;
    double arrival_rate = 0.0;
};

// At most this many phases: each gets its rows in the reports.
constexpr std::size_t max_phases = 100;

// The built-in shift: chat, then long documents, then chat again.
std::vector<PhaseSpec> default_shift_phases();

// The phases one after the other, each phase's arrivals starting where the
// previous phase's ended; one random stream for the whole workload.
Workload shift_workload(const std::vector<PhaseSpec>& phases, std::uint64_t seed);

// Multi-turn sessions sharing prefixes: half chat (a system prompt shared by
// many sessions, then turns of a user message and an answer), half agents (a
// long tool-description prefix shared likewise, then turns of a tool result
// and a short action). Each turn's prompt is the session so far: the system
// prompt, every earlier turn's input and output, and its own input. Requests
// carry the hashes of their prompt's 512-token blocks, as the Mooncake traces
// do: equal for the blocks of one system prompt, and for a session's own
// blocks across its turns; a partial last block gets a hash of its own.
struct MultiTurnOptions {
    std::size_t sessions = 200;
    double session_rate = 4.0; // sessions starting per simulated second (Poisson)
    std::uint64_t seed = 1;
};
constexpr index_t multi_turn_block_tokens = 512;

Workload multi_turn_workload(const MultiTurnOptions& options);

// Total KV tokens the requests end with (prompt + output each).
index_t total_tokens(const std::vector<RequestSpec>& requests);

} // namespace kvpool::sim
