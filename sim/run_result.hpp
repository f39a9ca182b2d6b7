// What one policy's run of a workload produced.
#pragma once

#include "sim_pool.hpp"

#include <kvpool/types.hpp>

#include <vector>

namespace kvpool::sim {

struct TimelinePoint {
    double time_s = 0.0;
    index_t running = 0; // requests that took part in the step starting at time_s
};

struct RunResult {
    std::size_t requests = 0;
    std::size_t completed = 0;
    std::size_t aborted = 0; // could not run even alone in the pool
    index_t retractions = 0;
    index_t steps = 0;
    double sim_seconds = 0.0;             // simulated time until the last request left
    double running_request_seconds = 0.0; // integral of running requests over simulated time
    index_t peak_running = 0;
    // Token accounting: every allocated token is released exactly once.
    index_t prefill_tokens = 0;    // including recomputation after retractions
    index_t recomputed_tokens = 0; // prefill of tokens a retraction had released
    index_t decode_tokens = 0;
    index_t completed_tokens = 0; // prompt + output of the completed requests
    index_t retracted_tokens = 0; // released by retractions
    index_t aborted_tokens = 0;   // released by aborts
    PoolStats pool;               // the pool's counters at the end
    double wall_seconds = 0.0;
    std::vector<TimelinePoint> timeline;

    double mean_running() const {
        return sim_seconds > 0 ? running_request_seconds / sim_seconds : 0.0;
    }
    double completed_per_second() const {
        return sim_seconds > 0 ? static_cast<double>(completed) / sim_seconds : 0.0;
    }
    double per_step(double total) const {
        return steps > 0 ? total / static_cast<double>(steps) : 0.0;
    }
    index_t tokens_allocated() const { return prefill_tokens + decode_tokens; }
    index_t tokens_released() const { return completed_tokens + retracted_tokens + aborted_tokens; }
};

} // namespace kvpool::sim
