#include "scheduler.hpp"

#include <algorithm>
#include <cmath>

namespace kvpool::sim {

Scheduler::Scheduler(SimPool& pool, const std::vector<RequestSpec>& requests,
                     SchedulerConfig config)
    : pool_(pool), requests_(requests), config_(config), generated_(requests.size(), 0),
      recompute_(requests.size(), false), last_token_s_(requests.size(), -1.0),
      admitted_once_(requests.size(), false) {
    result_.requests = requests.size();
    std::size_t phases = 1;
    for (const RequestSpec& r : requests)
        phases = std::max(phases, r.phase + 1);
    result_.phases.resize(phases);
    step_work_.resize(phases);
    latency_.resize(phases);
    if (config_.prefix_block_tokens > 0)
        cache_ = std::make_unique<PrefixCache>(
            PrefixCacheConfig{config_.prefix_block_tokens, pool_.page_size(),
                              config_.sliding_window, config_.state_slot_per_request},
            pool_);
    // The unified pool evicts through its own callback: whichever side is
    // short, the least recently used block goes whole, and the allocation is
    // tried again after each one.
    if (cache_ && config_.evict_across_sides)
        pool_.set_eviction([this] { return cache_->evict(EvictionKind::entry); });
}

Scheduler::~Scheduler() {
    if (cache_ && config_.evict_across_sides)
        pool_.set_eviction(nullptr);
}

double Scheduler::progress() const {
    return requests_.empty()
               ? 1.0
               : static_cast<double>(finished_) / static_cast<double>(requests_.size());
}

void Scheduler::step() {
    admit_arrivals();
    if (running_.empty() && waiting_.empty()) {
        result_.timeline.push_back({now_, 0});
        pool_.idle_point();
        const double arrival = requests_[next_arrival_].arrival_s;
        phase_of(next_arrival_).sim_seconds += arrival - now_;
        now_ = arrival;
        return;
    }
    const std::size_t decoding = running_.size(); // admitted in earlier steps
    const index_t prefilled = admit();
    const index_t decoded = decode(decoding);
    const auto active = static_cast<index_t>(running_.size());

    const double dt = config_.step_time.step_seconds(prefilled, decoded);
    result_.timeline.push_back({now_, active});
    result_.running_request_seconds += static_cast<double>(active) * dt;
    result_.peak_running = std::max(result_.peak_running, active);
    ++result_.steps;
    share_step_time(dt, active);
    now_ += dt;
    record_tokens(static_cast<std::size_t>(decoded));

    release_finished_and_old_window_pages();
    if (config_.check_invariants_every_step)
        pool_.check_invariants();
    if (done()) {
        result_.sim_seconds = now_;
        if (cache_) {
            cache_->clear();
            result_.prefix_cache = cache_->stats();
            result_.cache_released_tokens =
                static_cast<index_t>(result_.prefix_cache.evicted_blocks *
                                     static_cast<std::size_t>(config_.prefix_block_tokens));
        }
        result_.pool = pool_.stats();
        summarize_latency();
    }
}

void Scheduler::admit_arrivals() {
    while (next_arrival_ < requests_.size() && requests_[next_arrival_].arrival_s <= now_)
        waiting_.push_back(next_arrival_++);
}

index_t Scheduler::admit() {
    index_t prefilled = 0;
    while (!waiting_.empty() &&
           (config_.max_running == 0 || running_.size() < config_.max_running)) {
        const std::size_t r = waiting_.front();
        const RequestSpec& spec = requests_[r];
        const index_t tokens = spec.prompt_tokens + generated_[r];
        PrefixMatch prefix;
        if (cache_) {
            // At least one prompt token is prefilled, for the first output token.
            prefix = cache_->match(spec.prefix_blocks, spec.prompt_tokens - 1);
            cache_->lock(prefix);
        }
        const index_t new_tokens = tokens - prefix.hit_tokens;
        // Alone in the pool, the reserve is moot: run if the request fits at all.
        const bool alone = running_.empty();
        RequestKv kv;
        const bool admitted =
            (prefilled == 0 || prefilled + new_tokens <= config_.max_prefill_tokens) &&
            (alone || make_room(demand_of(r, new_tokens, tokens))) &&
            prefill_evicting(kv, prefix, new_tokens);
        if (!admitted) {
            if (cache_)
                cache_->unlock(prefix);
            if (!alone || prefilled > 0)
                break;
            waiting_.pop_front();
            enter_phase_of(r);
            abort(r, kv);
            continue;
        }
        waiting_.pop_front();
        enter_phase_of(r);
        if (!admitted_once_[r]) {
            admitted_once_[r] = true;
            latency_[spec.phase].queueing.push_back(now_ - spec.arrival_s);
        }
        keep_cacheable_window(r, kv);
        PhaseResult& phase = phase_of(r);
        phase.admitted_tokens += tokens;
        phase.prefix_hit_tokens += prefix.hit_tokens;
        result_.admitted_tokens += tokens;
        result_.prefix_hit_tokens += prefix.hit_tokens;
        PhaseStepWork& work = step_work_[spec.phase];
        work.prefill_tokens += new_tokens;
        ++work.requests;
        prefilled += new_tokens;
        result_.prefill_tokens += new_tokens;
        if (recompute_[r])
            result_.recomputed_tokens += new_tokens;
        running_.push_back({r, std::move(kv), std::move(prefix)});
    }
    return prefilled;
}

// The prefill, evicting cached blocks while it falls short.
bool Scheduler::prefill_evicting(RequestKv& kv, const PrefixMatch& prefix, index_t tokens) {
    const PoolDemand demand{tokens, config_.sliding_window > 0 ? tokens : 0,
                            config_.state_slot_per_request ? 1 : 0};
    while (!pool_.prefill(kv, prefix.pages, tokens))
        if (!evict_for(demand))
            return false;
    return true;
}

// A request whose prompt will leave new blocks in the cache keeps the
// sliding-window copies of the window before their end.
void Scheduler::keep_cacheable_window(std::size_t request, RequestKv& kv) const {
    if (!cache_ || config_.sliding_window == 0)
        return;
    const RequestSpec& spec = requests_[request];
    const index_t end = cache_->cacheable_tokens(spec.prefix_blocks, spec.prompt_tokens);
    const index_t ps = pool_.page_size();
    if (end <= kv.shared_pages * ps)
        return;
    kv.window_keep_begin =
        std::max(kv.shared_pages, std::max<index_t>(0, end - config_.sliding_window) / ps);
    kv.window_keep_end = end / ps;
}

// One cached block (or what the short side holds of one) evicted toward the
// demand; false when nothing could be.
bool Scheduler::evict_for(const PoolDemand& demand) {
    if (!cache_)
        return false;
    if (config_.evict_across_sides)
        return cache_->evict(EvictionKind::entry);
    if (!pool_.fits({demand.full_tokens, 0, 0}))
        return cache_->evict(EvictionKind::entry);
    if (demand.window_tokens > 0 && !pool_.fits({0, demand.window_tokens, 0}))
        return cache_->evict(EvictionKind::window);
    if (demand.state_slots > 0 && !pool_.fits({0, 0, demand.state_slots}))
        return cache_->evict(EvictionKind::state);
    // Each side has room alone: free the full side's, which the others' follow.
    return cache_->evict(EvictionKind::entry);
}

// Evicts until the demand fits; false when it cannot.
bool Scheduler::make_room(const PoolDemand& demand) {
    while (!pool_.fits(demand))
        if (!evict_for(demand))
            return false;
    return true;
}

// What admitting request r now should leave room for: its prefill, and a share
// of every running request's (and its own) tokens still to come.
// prefill_tokens of its `tokens` are new (the rest is a shared prefix).
PoolDemand Scheduler::demand_of(std::size_t request, index_t prefill_tokens, index_t tokens) const {
    const auto remaining = [&](std::size_t r) {
        return requests_[r].output_tokens - generated_[r];
    };
    double full_future = static_cast<double>(remaining(request));
    double window_future = static_cast<double>(window_growth(request, tokens));
    for (const Running& run : running_) {
        full_future += static_cast<double>(remaining(run.request));
        window_future += static_cast<double>(window_growth(run.request, run.kv.tokens));
    }
    PoolDemand d;
    d.full_tokens =
        prefill_tokens + static_cast<index_t>(std::ceil(config_.decode_reserve * full_future));
    if (config_.sliding_window > 0)
        d.window_tokens = prefill_tokens +
                          static_cast<index_t>(std::ceil(config_.decode_reserve * window_future));
    d.state_slots = config_.state_slot_per_request ? 1 : 0;
    return d;
}

// Tokens the sliding-window copy of a request holding `tokens` will still grow
// by: it holds at most the window, the partly used sliding-window page behind
// it and the rest of the full page in front of it (a full page binds all its
// sliding-window pages).
index_t Scheduler::window_growth(std::size_t request, index_t tokens) const {
    if (config_.sliding_window == 0)
        return 0;
    const index_t cap = config_.sliding_window + pool_.window_page_size() + pool_.page_size();
    const index_t final_tokens =
        requests_[request].prompt_tokens + requests_[request].output_tokens;
    return std::max<index_t>(0, std::min(final_tokens, cap) - std::min(tokens, cap));
}

// The pages a decode step of the first `decoding` running requests allocates.
PoolDemand Scheduler::decode_demand(std::size_t decoding) const {
    index_t new_pages = 0;
    for (std::size_t i = 0; i < decoding; ++i)
        new_pages += running_[i].kv.tokens % pool_.page_size() == 0 ? 1 : 0;
    const index_t tokens = new_pages * pool_.page_size();
    return {tokens, config_.sliding_window > 0 ? tokens : 0, 0};
}

index_t Scheduler::decode(std::size_t decoding) {
    while (decoding > 0) {
        std::vector<RequestKv*> batch;
        for (std::size_t i = 0; i < decoding; ++i)
            batch.push_back(&running_[i].kv);
        if (cache_)
            make_room(decode_demand(decoding));
        if (pool_.decode(batch)) {
            for (std::size_t i = 0; i < decoding; ++i) {
                ++generated_[running_[i].request];
                PhaseStepWork& work = step_work_[requests_[running_[i].request].phase];
                ++work.decode_tokens;
                ++work.requests;
            }
            result_.decode_tokens += static_cast<index_t>(decoding);
            return static_cast<index_t>(decoding);
        }
        if (evict_for(decode_demand(decoding)))
            continue;
        if (running_.size() == 1) {
            // Nothing else holds memory: this request can never finish here.
            Running last = std::move(running_.back());
            running_.pop_back();
            unlock_prefix(last);
            abort(last.request, last.kv);
            return 0;
        }
        retract_newest();
        decoding = std::min(decoding, running_.size());
    }
    return 0;
}

void Scheduler::retract_newest() {
    Running newest = std::move(running_.back());
    running_.pop_back();
    unlock_prefix(newest);
    result_.retracted_tokens += own_tokens(newest.kv);
    ++result_.retractions;
    ++phase_of(newest.request).retractions;
    pool_.release(newest.kv);
    requeue(newest.request);
}

void Scheduler::requeue(std::size_t request) {
    recompute_[request] = true;
    waiting_.insert(std::lower_bound(waiting_.begin(), waiting_.end(), request), request);
}

void Scheduler::unlock_prefix(Running& run) {
    if (cache_)
        cache_->unlock(run.prefix);
    run.prefix = PrefixMatch{};
}

index_t Scheduler::own_tokens(const RequestKv& kv) const {
    return kv.tokens - kv.shared_pages * pool_.page_size();
}

void Scheduler::abort(std::size_t request, RequestKv& kv) {
    result_.aborted_tokens += own_tokens(kv);
    if (kv.tokens > 0)
        pool_.release(kv);
    ++result_.aborted;
    ++phase_of(request).aborted;
    phase_of(request).last_finished_s = now_;
    ++finished_;
}

void Scheduler::enter_phase_of(std::size_t request) {
    for (; phases_entered_ <= requests_[request].phase; ++phases_entered_)
        result_.phases[phases_entered_].first_admitted_s = now_;
}

// Each phase gets the time of its requests' tokens and its head-count share of
// the step overhead; a step in which no request prefilled or decoded (only
// aborts) goes to the latest phase admitted.
void Scheduler::share_step_time(double step_seconds, index_t active) {
    index_t requests = 0;
    for (const PhaseStepWork& work : step_work_)
        requests += work.requests;
    const std::size_t latest = std::max<std::size_t>(phases_entered_, 1) - 1;
    for (std::size_t p = 0; p < step_work_.size(); ++p) {
        PhaseStepWork& work = step_work_[p];
        const double share =
            requests == 0 ? (p == latest ? step_seconds : 0.0)
                          : config_.step_time.share_seconds(
                                static_cast<double>(work.requests) / static_cast<double>(requests),
                                work.prefill_tokens, work.decode_tokens);
        work = PhaseStepWork{};
        if (share == 0.0)
            continue;
        PhaseResult& phase = result_.phases[p];
        phase.sim_seconds += share;
        phase.running_request_seconds += static_cast<double>(active) * share;
        phase.peak_running = std::max(phase.peak_running, active);
    }
}

// Called at the end of a step: the first `decoded` running requests decoded a
// token, and those after them were prefilled in it (a retraction drops the
// newest first, so the ones still running are exactly these).
void Scheduler::record_tokens(std::size_t decoded) {
    for (std::size_t i = 0; i < running_.size(); ++i) {
        const std::size_t r = running_[i].request;
        LatencySamples& samples = latency_[requests_[r].phase];
        if (i < decoded) {
            samples.itl.push_back(now_ - last_token_s_[r]);
        } else if (last_token_s_[r] >= 0.0) {
            continue; // prefilled again after a retraction: no new token yet
        } else {
            samples.ttft.push_back(now_ - requests_[r].arrival_s);
            result_.first_tokens.push_back({now_, now_ - requests_[r].arrival_s});
        }
        last_token_s_[r] = now_;
    }
}

void Scheduler::summarize_latency() {
    LatencySamples all;
    for (std::size_t p = 0; p < latency_.size(); ++p) {
        all.append(latency_[p]);
        result_.phases[p].latency = latency_[p].summarize();
    }
    result_.latency = all.summarize();
    latency_.clear();
}

// Releases a finished request; with a prefix cache, its prompt's full blocks
// stay there.
void Scheduler::complete(Running& run) {
    if (!cache_) {
        result_.completed_tokens += run.kv.tokens;
        pool_.release(run.kv);
        return;
    }
    const RequestSpec& spec = requests_[run.request];
    const CacheInsertion kept =
        cache_->insert(spec.prefix_blocks, spec.prompt_tokens, run.prefix, run.kv);
    result_.completed_tokens += own_tokens(run.kv) - kept.tokens_taken;
    pool_.release_pages(kept.pages_to_release);
    if (!kept.took_state_slot && run.kv.state_slot != unbound)
        pool_.release_state_slot(run.kv.state_slot);
    run.kv = RequestKv{};
    run.prefix = PrefixMatch{};
}

void Scheduler::release_finished_and_old_window_pages() {
    pool_.begin_releases();
    std::vector<Running> still_running;
    still_running.reserve(running_.size());
    for (Running& run : running_) {
        const RequestSpec& spec = requests_[run.request];
        if (generated_[run.request] == spec.output_tokens) {
            complete(run);
            ++result_.completed;
            ++phase_of(run.request).completed;
            phase_of(run.request).last_finished_s = now_;
            ++finished_;
            continue;
        }
        if (config_.sliding_window > 0) {
            const index_t old_tokens = std::max<index_t>(0, run.kv.tokens - config_.sliding_window);
            pool_.release_window(run.kv, old_tokens / pool_.window_page_size());
        }
        still_running.push_back(std::move(run));
    }
    running_.swap(still_running);
    pool_.end_releases();
}

} // namespace kvpool::sim
