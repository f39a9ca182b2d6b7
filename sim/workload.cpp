#include "workload.hpp"

#include "random_stream.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvpool::sim {

namespace {

struct LengthDistribution {
    double median;
    double sigma;
    index_t min;
    index_t max;

    index_t draw(RandomStream& random) const {
        const double x = std::round(random.log_normal(median, sigma));
        return std::clamp(static_cast<index_t>(x), min, max);
    }
};

constexpr LengthDistribution chat_prompt{1024, 1.0, 16, 16384};
constexpr LengthDistribution chat_output{320, 0.8, 8, 4096};
constexpr LengthDistribution document_prompt{24576, 0.7, 8192, 131072};
constexpr LengthDistribution document_output{192, 0.6, 8, 2048};
// One request in this many is a long document in the long-context mix.
constexpr std::uint64_t document_every = 6;

std::string mix_description(SyntheticKind kind) {
    if (kind == SyntheticKind::documents)
        return fmt::format("long documents: log-normal prompts (median {:.0f}, {}..{}) and outputs "
                           "(median {:.0f})",
                           document_prompt.median, document_prompt.min, document_prompt.max,
                           document_output.median);
    return fmt::format(
        "log-normal prompts (median {:.0f}) and outputs (median {:.0f}){}", chat_prompt.median,
        chat_output.median,
        kind == SyntheticKind::long_context
            ? fmt::format(", one in {} a long document (prompt median {:.0f}, {}..{})",
                          document_every, document_prompt.median, document_prompt.min,
                          document_prompt.max)
            : std::string());
}

// Appends one phase's requests, Poisson arrivals from `clock` on.
void draw_phase(const PhaseSpec& spec, std::size_t phase, RandomStream& random, double& clock,
                std::vector<RequestSpec>& out) {
    for (std::size_t i = 0; i < spec.requests; ++i) {
        clock += random.exponential(spec.arrival_rate);
        const bool document =
            spec.kind == SyntheticKind::documents ||
            (spec.kind == SyntheticKind::long_context && random.uniform() * document_every < 1.0);
        RequestSpec r;
        r.arrival_s = clock;
        r.prompt_tokens = (document ? document_prompt : chat_prompt).draw(random);
        r.output_tokens = (document ? document_output : chat_output).draw(random);
        r.phase = phase;
        out.push_back(r);
    }
}

} // namespace

const char* mix_name(SyntheticKind kind) {
    switch (kind) {
    case SyntheticKind::chat:
        return "chat";
    case SyntheticKind::long_context:
        return "long-context";
    case SyntheticKind::documents:
        break;
    }
    return "documents";
}

std::optional<SyntheticKind> mix_from_name(const std::string& name) {
    for (auto kind : {SyntheticKind::chat, SyntheticKind::long_context, SyntheticKind::documents})
        if (name == mix_name(kind))
            return kind;
    return std::nullopt;
}

double default_arrival_rate(SyntheticKind kind) {
    switch (kind) {
    case SyntheticKind::chat:
        return 50.0;
    case SyntheticKind::long_context:
        return 10.0;
    case SyntheticKind::documents:
        break;
    }
    return 5.0;
}

SyntheticOptions default_synthetic_options(SyntheticKind kind) {
    SyntheticOptions o;
    o.kind = kind;
    o.seed = 1;
    o.requests = kind == SyntheticKind::chat           ? 1500
                 : kind == SyntheticKind::long_context ? 600
                                                       : 200;
    o.arrival_rate = default_arrival_rate(kind);
    return o;
}

Workload synthetic_workload(const SyntheticOptions& options) {
    RandomStream random(options.seed);
    Workload w;
    w.name = options.kind == SyntheticKind::chat ? "default" : mix_name(options.kind);
    w.description =
        fmt::format("{} requests, Poisson arrivals at {:g}/s, seed {}: {}", options.requests,
                    options.arrival_rate, options.seed, mix_description(options.kind));
    double clock = 0.0;
    w.requests.reserve(options.requests);
    draw_phase({options.kind, options.requests, options.arrival_rate}, 0, random, clock,
               w.requests);
    w.phases.push_back({w.name, w.description, 0, options.requests});
    return w;
}

std::vector<PhaseSpec> default_shift_phases() {
    return {{SyntheticKind::chat, 600, default_arrival_rate(SyntheticKind::chat)},
            {SyntheticKind::documents, 120, default_arrival_rate(SyntheticKind::documents)},
            {SyntheticKind::chat, 600, default_arrival_rate(SyntheticKind::chat)}};
}

Workload shift_workload(const std::vector<PhaseSpec>& phases, std::uint64_t seed) {
    RandomStream random(seed);
    Workload w;
    w.name = "shift";
    std::string mixes;
    double clock = 0.0;
    for (std::size_t p = 0; p < phases.size(); ++p) {
        const PhaseSpec& spec = phases[p];
        w.phases.push_back({mix_name(spec.kind),
                            fmt::format("{} requests at {:g}/s, {}", spec.requests,
                                        spec.arrival_rate, mix_description(spec.kind)),
                            w.requests.size(), spec.requests});
        draw_phase(spec, p, random, clock, w.requests);
        mixes += fmt::format("{}{} {} at {:g}/s", p ? ", then " : "", mix_name(spec.kind),
                             spec.requests, spec.arrival_rate);
    }
    w.description = fmt::format("{} phases, {} requests, Poisson arrivals, seed {}: {}",
                                phases.size(), w.requests.size(), seed, mixes);
    return w;
}

namespace {

// The kinds of multi-turn sessions.
struct SessionKind {
    const char* name;
    LengthDistribution prefix;   // the shared system prompt or tool descriptions
    std::size_t shared_prefixes; // distinct ones, each shared by many sessions
    std::size_t min_turns, max_turns;
    LengthDistribution turn_input; // a user message or a tool result
    LengthDistribution output;
    double think_s; // mean time between a turn's arrival and the next one's
};

constexpr SessionKind chat_session{
    "chat", {1536, 0.5, 512, 4096}, 4, 2, 8, {256, 1.0, 16, 4096}, {320, 0.8, 8, 2048}, 8.0};
constexpr SessionKind agent_session{
    "agent", {8192, 0.4, 4096, 16384}, 4, 4, 12, {1024, 0.8, 32, 8192}, {128, 0.6, 8, 1024}, 2.0};
// Sessions end before a prompt would outgrow this.
constexpr index_t max_session_prompt = 65536;

// Block hashes: a shared prefix's own, a session's own, and the unique
// partial last blocks, in disjoint ranges.
std::uint64_t prefix_block_hash(std::size_t prefix, index_t block) {
    return (std::uint64_t(1) << 40) * (prefix + 1) + static_cast<std::uint64_t>(block);
}
std::uint64_t session_block_hash(std::size_t session, index_t block) {
    return (std::uint64_t(1) << 40) * (session + 1001) + static_cast<std::uint64_t>(block);
}

} // namespace

Workload multi_turn_workload(const MultiTurnOptions& options) {
    RandomStream random(options.seed);
    const SessionKind* kinds[] = {&chat_session, &agent_session};
    // The shared prefixes' lengths: kind k's prefix i is number k * 4 + i.
    std::vector<index_t> prefix_tokens;
    for (const SessionKind* kind : kinds)
        for (std::size_t i = 0; i < kind->shared_prefixes; ++i)
            prefix_tokens.push_back(kind->prefix.draw(random));
    Workload w;
    w.name = "multi-turn";
    w.block_tokens = multi_turn_block_tokens;
    std::uint64_t unique_hash = std::uint64_t(1) << 62;
    double start = 0.0;
    for (std::size_t session = 0; session < options.sessions; ++session) {
        start += random.exponential(options.session_rate);
        const std::size_t k = random.uniform() < 0.5 ? 0 : 1;
        const SessionKind& kind = *kinds[k];
        const std::size_t prefix =
            k * chat_session.shared_prefixes +
            std::min(kind.shared_prefixes - 1,
                     static_cast<std::size_t>(random.uniform() *
                                              static_cast<double>(kind.shared_prefixes)));
        const auto turns =
            kind.min_turns +
            static_cast<std::size_t>(random.uniform() *
                                     static_cast<double>(kind.max_turns - kind.min_turns + 1));
        index_t history = prefix_tokens[prefix];
        double arrival = start;
        for (std::size_t turn = 0; turn < turns; ++turn) {
            RequestSpec r;
            r.arrival_s = arrival;
            r.prompt_tokens = history + kind.turn_input.draw(random);
            r.output_tokens = kind.output.draw(random);
            if (r.prompt_tokens + r.output_tokens > max_session_prompt)
                break;
            const index_t bt = multi_turn_block_tokens;
            for (index_t b = 0; b * bt < r.prompt_tokens; ++b) {
                const bool full = (b + 1) * bt <= r.prompt_tokens;
                r.prefix_blocks.push_back(!full ? unique_hash++
                                          : (b + 1) * bt <= prefix_tokens[prefix]
                                              ? prefix_block_hash(prefix, b)
                                              : session_block_hash(session, b));
            }
            r.prefix_blocks_given = true;
            history = r.prompt_tokens + r.output_tokens;
            arrival += random.exponential(1.0 / kind.think_s);
            w.requests.push_back(std::move(r));
        }
    }
    std::stable_sort(
        w.requests.begin(), w.requests.end(),
        [](const RequestSpec& a, const RequestSpec& b) { return a.arrival_s < b.arrival_s; });
    w.description = fmt::format(
        "{} sessions ({} requests), Poisson session starts at {:g}/s, seed {}: half chat (a "
        "system prompt of median {:.0f} tokens shared by a quarter of them, {}..{} turns), half "
        "agents (tool descriptions of median {:.0f}, {}..{} turns); prefix hashes of {}-token "
        "blocks",
        options.sessions, w.requests.size(), options.session_rate, options.seed,
        chat_session.prefix.median, chat_session.min_turns, chat_session.max_turns,
        agent_session.prefix.median, agent_session.min_turns, agent_session.max_turns,
        multi_turn_block_tokens);
    w.phases.push_back({w.name, w.description, 0, w.requests.size()});
    return w;
}

index_t total_tokens(const std::vector<RequestSpec>& requests) {
    index_t sum = 0;
    for (const auto& r : requests)
        sum += r.prompt_tokens + r.output_tokens;
    return sum;
}

} // namespace kvpool::sim
