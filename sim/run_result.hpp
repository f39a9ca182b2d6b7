// What one policy's run of a workload produced, overall and per phase of the
// workload.
#pragma once

#include "latency.hpp"
#include "sim_pool.hpp"

#include <kvpool/types.hpp>

#include <vector>

namespace kvpool::sim {

// A request's first token: when it came, and how long after the arrival.
struct FirstToken {
    double time_s = 0.0;
    double ttft_s = 0.0;
};

struct TimelinePoint {
    double time_s = 0.0;
    index_t running = 0; // requests that took part in the step starting at time_s
};

// What the whole run, or one phase of it, did and took.
struct SpanTotals {
    std::size_t completed = 0;
    std::size_t aborted = 0; // could not run even alone in the pool
    index_t retractions = 0;
    double sim_seconds = 0.0; // simulated time (a phase: its share of it)
    // Integral of running requests over that time.
    double running_request_seconds = 0.0;
    index_t peak_running = 0;
    SpanLatency latency;
    // Prefix cache: tokens of the requests at their admissions, and those of
    // them taken from the cache instead of prefilled.
    index_t admitted_tokens = 0;
    index_t prefix_hit_tokens = 0;

    double prefix_hit_rate() const {
        return admitted_tokens > 0
                   ? static_cast<double>(prefix_hit_tokens) / static_cast<double>(admitted_tokens)
                   : 0.0;
    }

    double mean_running() const {
        return sim_seconds > 0 ? running_request_seconds / sim_seconds : 0.0;
    }
    double completed_per_second() const {
        return sim_seconds > 0 ? static_cast<double>(completed) / sim_seconds : 0.0;
    }
};

// One phase of the workload. Its requests, retractions and aborts are those of
// the phase's requests. Phases overlap in time (the engine still finishes one
// phase's requests while it admits the next one's), so the simulated time is
// shared out: each step's time goes to the phases by what their requests cost
// in it (their prefilled and decoded tokens, and the step overhead by head
// count), and idle time to the phase whose request the engine waits for. The
// phases' figures add up to the run's; running requests are averaged over the
// phase's share of the time.
struct PhaseResult : SpanTotals {
    double first_admitted_s = 0.0; // when the engine took its first request
    double last_finished_s = 0.0;  // when its last request completed or was aborted
};

struct RunResult : SpanTotals {
    std::size_t requests = 0;
    index_t steps = 0;
    // Token accounting: every allocated token is released exactly once.
    // Tokens a request holds of its own: not those it shares from the prefix cache.
    index_t prefill_tokens = 0;    // including recomputation after retractions
    index_t recomputed_tokens = 0; // prefill of tokens a retraction had released
    index_t decode_tokens = 0;
    // Released when the request completed: prompt + output of the completed
    // requests, but what it left in the prefix cache.
    index_t completed_tokens = 0;
    index_t retracted_tokens = 0;      // released by retractions
    index_t aborted_tokens = 0;        // released by aborts
    index_t cache_released_tokens = 0; // released by the prefix cache (evictions, and at the end)
    PrefixCacheStats prefix_cache;
    PoolStats pool; // the pool's counters at the end
    double wall_seconds = 0.0;
    std::vector<TimelinePoint> timeline;
    std::vector<FirstToken> first_tokens; // in time order
    std::vector<PhaseResult> phases;      // one per phase of the workload, in order

    double per_step(double total) const {
        return steps > 0 ? total / static_cast<double>(steps) : 0.0;
    }
    index_t tokens_allocated() const { return prefill_tokens + decode_tokens; }
    index_t tokens_released() const {
        return completed_tokens + retracted_tokens + aborted_tokens + cache_released_tokens;
    }
};

} // namespace kvpool::sim
