// What users feel of a run: time to first token, the gaps between a request's
// tokens, and the time it waited in the queue, as percentiles over requests
// (inter-token gaps: over every gap of every request).
#pragma once

#include <cstddef>
#include <vector>

namespace kvpool::sim {

// Nearest-rank percentiles (the smallest sample with at least p of the samples
// at or below it), in seconds; all zero without samples.
struct LatencyStats {
    std::size_t count = 0;
    double p50 = 0.0;
    double p90 = 0.0;
    double p99 = 0.0;
};

// samples is reordered.
LatencyStats summarize(std::vector<double>& samples);

// One run's, or one phase's, latency.
//  ttft:     arrival to the end of the step that prefilled the request (which
//            yields its first token); every request that got one.
//  itl:      between consecutive tokens of one request: every decode step
//            yields one, and a retraction's gap lasts until the request is
//            prefilled again and decodes its next token.
//  queueing: arrival to the start of the step that first admitted it.
struct SpanLatency {
    LatencyStats ttft;
    LatencyStats itl;
    LatencyStats queueing;
};

// Collects the samples of one span while a run goes.
struct LatencySamples {
    std::vector<double> ttft;
    std::vector<double> itl;
    std::vector<double> queueing;

    void append(const LatencySamples& other);
    SpanLatency summarize();
};

} // namespace kvpool::sim
