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

} // namespace

SyntheticOptions default_synthetic_options(SyntheticKind kind) {
    SyntheticOptions o;
    o.kind = kind;
    o.seed = 1;
    o.requests = kind == SyntheticKind::chat ? 1500 : 600;
    o.arrival_rate = kind == SyntheticKind::chat ? 50.0 : 10.0;
    return o;
}

Workload synthetic_workload(const SyntheticOptions& options) {
    RandomStream random(options.seed);
    Workload w;
    const bool long_context = options.kind == SyntheticKind::long_context;
    w.name = long_context ? "long-context" : "default";
    w.description = fmt::format(
        "{} requests, Poisson arrivals at {:g}/s, seed {}: log-normal prompts (median {:.0f}) "
        "and outputs (median {:.0f}){}",
        options.requests, options.arrival_rate, options.seed, chat_prompt.median,
        chat_output.median,
        long_context ? fmt::format(", one in {} a long document (prompt median {:.0f}, {}..{})",
                                   document_every, document_prompt.median, document_prompt.min,
                                   document_prompt.max)
                     : std::string());
    double clock = 0.0;
    w.requests.reserve(options.requests);
    for (std::size_t i = 0; i < options.requests; ++i) {
        clock += random.exponential(options.arrival_rate);
        const bool document = long_context && random.uniform() * document_every < 1.0;
        RequestSpec r;
        r.arrival_s = clock;
        r.prompt_tokens = (document ? document_prompt : chat_prompt).draw(random);
        r.output_tokens = (document ? document_output : chat_output).draw(random);
        w.requests.push_back(r);
    }
    return w;
}

index_t total_tokens(const std::vector<RequestSpec>& requests) {
    index_t sum = 0;
    for (const auto& r : requests)
        sum += r.prompt_tokens + r.output_tokens;
    return sum;
}

} // namespace kvpool::sim
