#include "latency.hpp"

#include <algorithm>
#include <cmath>

namespace kvpool::sim {

namespace {

double nearest_rank(const std::vector<double>& sorted, double p) {
    const auto n = static_cast<double>(sorted.size());
    const auto rank = static_cast<std::size_t>(std::max(1.0, std::ceil(p * n - 1e-9)));
    return sorted[std::min(rank, sorted.size()) - 1];
}

} // namespace

LatencyStats summarize(std::vector<double>& samples) {
    LatencyStats s;
    s.count = samples.size();
    if (samples.empty())
        return s;
    std::sort(samples.begin(), samples.end());
    s.p50 = nearest_rank(samples, 0.50);
    s.p90 = nearest_rank(samples, 0.90);
    s.p99 = nearest_rank(samples, 0.99);
    return s;
}

void LatencySamples::append(const LatencySamples& other) {
    ttft.insert(ttft.end(), other.ttft.begin(), other.ttft.end());
    itl.insert(itl.end(), other.itl.begin(), other.itl.end());
    queueing.insert(queueing.end(), other.queueing.begin(), other.queueing.end());
}

SpanLatency LatencySamples::summarize() {
    return {sim::summarize(ttft), sim::summarize(itl), sim::summarize(queueing)};
}

} // namespace kvpool::sim
