// The scheduler model: continuous batching over a SimPool, one forward step at
// a time.
//  - Requests queue in arrival order. Each step admits from the head of the
//    queue while the pool has room for the prompt plus a reserve for the
//    running requests' future tokens, up to a prefill token budget (a request
//    larger than the budget runs alone in its step).
//  - Every request admitted in an earlier step decodes one token per step.
//    When the pool cannot give the batch its tokens, the newest request is
//    retracted (its KV released, the request re-queued; on re-admission it
//    prefills its prompt and the tokens it had generated again).
//  - A request that cannot run even alone in the pool is aborted.
//  - Finished requests are released; for sliding-window models, the
//    sliding-window copy of pages that left the window is released.
//  - With a prefix cache (requests carrying prefix block hashes), a request
//    shares the longest usable cached prefix of its prompt and prefills the
//    rest; a finished request leaves its prompt's full blocks in the cache.
//    When the pool is short (admission, prefill or decode), cached blocks
//    are evicted least recently used, one at a time, until the allocation
//    can succeed: on the unified pool whole blocks (their full-attention KV
//    and all they hold) whichever side is short; on a fixed split only what
//    the short side holds (full: whole blocks; sliding window: window
//    copies; state slots: states), as engines do.
// Simulated time advances by the step-time model. The run is also accounted
// per phase of the workload (run_result.hpp says how time is shared out).
#pragma once

#include "prefix_cache.hpp"
#include "run_result.hpp"
#include "sim_pool.hpp"
#include "step_time_model.hpp"
#include "workload.hpp"

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace kvpool::sim {

struct SchedulerConfig {
    index_t sliding_window = 0; // tokens; 0: the model has no sliding-window layers
    bool state_slot_per_request = false;
    // Share of the running requests' remaining tokens that admission keeps free
    // (SGLang's new_token_ratio, held constant): 0 admits while the prompt fits.
    double decode_reserve = 0.1;
    index_t max_prefill_tokens = 16384; // SGLang's default --max-prefill-tokens
    std::size_t max_running = 0;        // 0: as many as memory allows
    // Tokens per prefix block hash of the requests; 0: no prefix cache.
    index_t prefix_block_tokens = 0;
    // The unified pool: eviction frees whole cached blocks whichever side is short.
    bool evict_across_sides = false;
    StepTimeModel step_time;
    bool check_invariants_every_step = false;
};

class Scheduler {
public:
    // requests must be in arrival order and outlive the scheduler.
    Scheduler(SimPool& pool, const std::vector<RequestSpec>& requests, SchedulerConfig config);
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    bool done() const { return finished_ == requests_.size(); }
    double progress() const;
    // One forward step, or a jump to the next arrival when nothing can run.
    void step();
    const RunResult& result() const { return result_; }
    std::size_t running_count() const { return running_.size(); }

private:
    struct Running {
        std::size_t request;
        RequestKv kv;
        PrefixMatch prefix; // locked in the cache while it runs
    };

    void admit_arrivals();
    index_t admit();
    PoolDemand demand_of(std::size_t request, index_t prefill_tokens, index_t tokens) const;
    PoolDemand decode_demand(std::size_t decoding) const;
    bool evict_for(const PoolDemand& demand);
    bool make_room(const PoolDemand& demand);
    bool prefill_evicting(RequestKv& kv, const PrefixMatch& prefix, index_t tokens);
    void keep_cacheable_window(std::size_t request, RequestKv& kv) const;
    void complete(Running& run);
    void unlock_prefix(Running& run);
    index_t own_tokens(const RequestKv& kv) const;
    index_t decode(std::size_t decoding);
    void retract_newest();
    void abort(std::size_t request, RequestKv& kv);
    void requeue(std::size_t request);
    void release_finished_and_old_window_pages();
    index_t window_growth(std::size_t request, index_t tokens) const;
    void enter_phase_of(std::size_t request);
    void share_step_time(double step_seconds, index_t active);
    void record_tokens(std::size_t decoded);
    void summarize_latency();
    PhaseResult& phase_of(std::size_t request) { return result_.phases[requests_[request].phase]; }

    // What a phase's requests did in the current step.
    struct PhaseStepWork {
        index_t prefill_tokens = 0;
        index_t decode_tokens = 0;
        index_t requests = 0; // that prefilled or decoded
    };

    SimPool& pool_;
    std::unique_ptr<PrefixCache> cache_; // none without prefix hashes
    const std::vector<RequestSpec>& requests_;
    SchedulerConfig config_;
    std::vector<index_t> generated_;  // output tokens so far, per request
    std::vector<bool> recompute_;     // the next prefill recomputes released tokens
    std::deque<std::size_t> waiting_; // sorted by request index (arrival order)
    std::vector<Running> running_;    // in admission order: the newest last
    std::size_t next_arrival_ = 0;
    std::size_t finished_ = 0;
    double now_ = 0.0;
    std::size_t phases_entered_ = 0;       // phases whose first request was admitted (or aborted)
    std::vector<PhaseStepWork> step_work_; // per phase, this step
    // Latency: when each request's latest token came (negative: none yet),
    // and the samples of each phase.
    std::vector<double> last_token_s_;
    std::vector<bool> admitted_once_;
    std::vector<LatencySamples> latency_;
    RunResult result_;
};

// Runs a scheduler to the end; calls progress(fraction done) now and then.
template <class Progress> RunResult run_to_completion(Scheduler& scheduler, Progress&& progress) {
    for (std::uint64_t n = 0; !scheduler.done(); ++n) {
        scheduler.step();
        if (n % 64 == 0)
            progress(scheduler.progress());
    }
    return scheduler.result();
}

} // namespace kvpool::sim
