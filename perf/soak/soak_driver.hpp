// The soak: a seeded scheduler loop of engine-style calls on a pair (Model:
// SwaModel or MambaModel) at the peer's geometry: prefill batches with
// alloc_extend (and a state slot per request on the Mamba pair), decode steps
// with alloc_decode, finished requests freed, window-expired tokens released
// with free_swa (SWA pair), forward events, opportunistic flushes at idle
// points. Out of room it does what an engine does: admission waits, a decode
// step retracts the newest request. Each allocator call counts as one
// operation. Checks: invariants and stamped data every check_every operations
// and at the end, memory after warm-up against the end, and both sides back
// to idle after teardown.
#pragma once

#include "device_ids.hpp"
#include "forward_events.hpp"
#include "idle_checks.hpp"
#include "memory_probe.hpp"
#include "requests.hpp"
#include "soak_result.hpp"
#include "stamps.hpp"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

namespace kvpool::soak {

template <class ExecutionSpace, class Model> class SoakDriver {
    using index_view = typename Model::index_view;

public:
    explicit SoakDriver(const SoakOptions& options)
        : o_(options), model_(o_.tokens_per_side, o_.page_size, o_.mode), pair_(model_.pair()),
          rng_(o_.seed), window_tokens_(round_to_page(
                             std::clamp<index_t>(o_.tokens_per_side / 16, 4 * o_.page_size, 4096))),
          max_prompt_(std::clamp<index_t>(o_.tokens_per_side / 16, o_.page_size, 4096)),
          max_output_(std::clamp<index_t>(o_.tokens_per_side / 32, 8, 1024)),
          ids_(model_.full_capacity_tokens()), full_at_start_(model_.full().occupancy()),
          second_at_start_(model_.second().occupancy()) {
        r_.options = o_;
        r_.pair = Model::name;
        r_.backend = ExecutionSpace::name();
        r_.buffer_bytes = model_.pool().total_bytes();
    }

    SoakResult run() {
        const index_t warm_up_ops = std::max(o_.check_every, o_.ops / 10);
        index_t next_check = o_.check_every;
        const auto start = std::chrono::steady_clock::now();
        while (r_.ops < o_.ops && r_.failures.empty()) {
            try {
                step();
            } catch (const Error& e) {
                fail("operation " + std::to_string(r_.ops) + ": " + e.what());
                break;
            }
            if (r_.ops >= next_check) {
                check();
                if (next_check == round_up(warm_up_ops, o_.check_every))
                    r_.warm = sample_memory();
                next_check += o_.check_every;
            }
        }
        if (r_.failures.empty())
            check();
        r_.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        r_.end = sample_memory();
        check_memory_flat();
        r_.pages_moved =
            model_.full().counters().pages_moved + model_.second().counters().pages_moved;
        r_.bytes_moved =
            model_.full().counters().bytes_moved + model_.second().counters().bytes_moved;
        teardown();
        return r_;
    }

private:
    // ---------------------------------------------------------------- one scheduler step
    void step() {
        ++r_.steps;
        events_.complete_older();
        new_tokens_.clear();
        new_slots_.clear();
        if (running_.empty() || chance(0.6))
            admit();
        decode();
        forward();
        finish_requests();
        if constexpr (Model::windowed)
            release_window();
        if (o_.mode == CompactionMode::lazy) {
            pair_.flush_opportunistic(space_);
            ++r_.ops;
        }
    }

    // A prefill batch of fresh requests; without room the batch waits.
    void admit() {
        const auto batch = static_cast<std::size_t>(uniform(1, 8));
        std::vector<index_t> lengths(batch);
        index_t total = 0;
        for (auto& n : lengths)
            total += n = uniform(1, max_prompt_);
        bool ok = try_admit(lengths, total);
        if (!ok && running_.empty()) {
            // Nothing runs: once the forwards are done, an empty pool must take it.
            events_.complete_all(space_);
            ok = try_admit(lengths, total);
            if (!ok)
                return fail("an idle pool refused a prefill batch of " + std::to_string(total) +
                            " tokens");
        }
        if (!ok)
            ++r_.admission_waits;
    }

    // The batch's state slots (Mamba pair), then its KV; all or nothing.
    bool try_admit(const std::vector<index_t>& lengths, index_t total) {
        const auto batch = static_cast<index_t>(lengths.size());
        slots_.clear();
        if constexpr (Model::state_slots) {
            ++r_.ops;
            const auto slots = pair_.alloc_state_slots(space_, batch);
            if (!slots)
                return false;
            slots_ = ids_.download(space_, *slots);
        }
        const index_view out = ids_.output(total);
        last_loc_host_.assign(lengths.size(), unbound); // fresh requests: never read
        ++r_.ops;
        if (!pair_.alloc_extend(space_, std::vector<index_t>(lengths.size(), 0), lengths,
                                ids_.upload(space_, last_loc_host_), out)) {
            if constexpr (Model::state_slots) {
                pair_.free_state_slots(space_, slots_);
                ++r_.ops;
            }
            return false;
        }
        const auto& ids = ids_.download(space_, out);
        auto first = ids.begin();
        for (index_t i = 0; i < batch; ++i) {
            const index_t n = lengths[static_cast<std::size_t>(i)];
            Request r;
            r.tokens.assign(first, first + static_cast<std::ptrdiff_t>(n));
            r.target_tokens = n + uniform(1, max_output_);
            if constexpr (Model::state_slots)
                r.state_slot = slots_[static_cast<std::size_t>(i)];
            running_.push_back(std::move(r));
            first += static_cast<std::ptrdiff_t>(n);
        }
        new_tokens_.insert(new_tokens_.end(), ids.begin(), ids.end());
        new_slots_.insert(new_slots_.end(), slots_.begin(), slots_.end());
        r_.requests_admitted += batch;
        return true;
    }

    // One token for every running request; without room the newest is retracted.
    void decode() {
        while (!running_.empty()) {
            seq_lens_.clear();
            last_loc_host_.clear();
            for (const Request& r : running_) {
                seq_lens_.push_back(static_cast<index_t>(r.tokens.size()) + 1);
                last_loc_host_.push_back(r.tokens.back());
            }
            const index_view out = ids_.output(static_cast<index_t>(running_.size()));
            ++r_.ops;
            if (pair_.alloc_decode(space_, seq_lens_, ids_.upload(space_, last_loc_host_), out)) {
                const auto& ids = ids_.download(space_, out);
                for (std::size_t i = 0; i < running_.size(); ++i)
                    running_[i].tokens.push_back(ids[i]);
                new_tokens_.insert(new_tokens_.end(), ids.begin(), ids.end());
                return;
            }
            ++r_.retractions;
            free_request(running_.back());
            running_.pop_back();
        }
    }

    // The forward writes the new tokens' KV (the stamps; on the SWA pair on
    // both sides) and the new requests' state; it reads every page: its event
    // guards both.
    void forward() {
        if (new_tokens_.empty())
            return;
        const auto n = static_cast<index_t>(new_tokens_.size());
        const index_view ids = ids_.upload(space_, new_tokens_);
        const index_view full = ids_.physical(n);
        model_.translate_full(space_, ids, full);
        ++r_.ops;
        stamp_tokens(space_, model_.pool().bytes(), full_stamps(), ids, full, n);
        const std::vector<index_t>& second = Model::state_slots ? new_slots_ : new_tokens_;
        if (!second.empty()) {
            const index_view second_ids =
                Model::state_slots ? ids_.upload(space_, new_slots_) : ids;
            const auto physical = model_.translate_second(space_, second_ids);
            ++r_.ops;
            stamp_tokens(space_, model_.pool().bytes(), second_stamps(), second_ids, physical,
                         static_cast<index_t>(second.size()));
        }
        const CompletionTokenPtr token = events_.record(space_);
        pair_.set_inflight_forward(token, new_tokens_);
        pair_.set_latest_forward_done(token);
        r_.ops += 2;
    }

    void finish_requests() {
        const auto done = std::partition(running_.begin(), running_.end(), [](const Request& r) {
            return static_cast<index_t>(r.tokens.size()) < r.target_tokens;
        });
        const auto finished = std::distance(done, running_.end());
        if (finished > 1) {
            pair_.free_group_begin();
            ++r_.ops;
        }
        for (auto it = done; it != running_.end(); ++it)
            free_request(*it);
        if (finished > 1) {
            pair_.free_group_end(space_);
            ++r_.ops;
        }
        r_.requests_finished += static_cast<index_t>(finished);
        running_.erase(done, running_.end());
    }

    void free_request(const Request& r) {
        page_tokens_.clear();
        append_page_tokens(r, o_.page_size, 0, pages_of(r, o_.page_size), page_tokens_);
        pair_.free(space_, page_tokens_);
        ++r_.ops;
        if constexpr (Model::state_slots) {
            pair_.free_state_slots(space_, {r.state_slot});
            ++r_.ops;
        }
    }

    // The SWA pages that left every running request's window, in one call.
    void release_window() {
        page_tokens_.clear();
        for (Request& r : running_) {
            const index_t expired = expired_pages(r, o_.page_size, window_tokens_);
            append_page_tokens(r, o_.page_size, r.window_released_pages, expired, page_tokens_);
            r.window_released_pages = std::max(r.window_released_pages, expired);
        }
        if (page_tokens_.empty())
            return;
        pair_.free_swa(space_, page_tokens_);
        ++r_.ops;
    }

    // ---------------------------------------------------------------- checks
    void check() {
        ++r_.checks;
        try {
            pair_.check_invariants(space_);
        } catch (const Error& e) {
            return fail("check_invariants after " + std::to_string(r_.ops) +
                        " operations: " + e.what());
        }
        live_.clear();
        for (const Request& r : running_)
            live_.insert(live_.end(), r.tokens.begin(), r.tokens.end());
        if (!live_.empty()) {
            const index_view ids = ids_.upload(space_, live_);
            const index_view physical = ids_.physical(static_cast<index_t>(live_.size()));
            model_.translate_full(space_, ids, physical);
            count_stamps("full", full_stamps(), ids, physical);
        }
        live_.clear();
        for (const Request& r : running_)
            if constexpr (Model::state_slots)
                live_.push_back(r.state_slot);
            else
                append_window_tokens(r, o_.page_size, live_);
        if (!live_.empty()) {
            const index_view ids = ids_.upload(space_, live_);
            count_stamps(Model::name, second_stamps(), ids, model_.translate_second(space_, ids));
        }
    }

    template <class PhysicalView>
    void count_stamps(const char* side, const StampLayout& layout, const index_view& ids,
                      const PhysicalView& physical) {
        const auto n = static_cast<index_t>(ids.extent(0));
        const index_t bad =
            count_bad_stamps(space_, model_.pool().bytes(), layout, ids, physical, n);
        r_.entries_checked += n;
        if (bad > 0)
            fail("data check after " + std::to_string(r_.ops) +
                 " operations: " + std::to_string(bad) + " stamp words of " + std::to_string(n) +
                 " live " + side + " entries not found through translate");
    }

    void check_memory_flat() {
        const auto grew = [&](const char* what, index_t before, index_t after) {
            if (after - before > o_.memory_tolerance_bytes)
                fail(std::string(what) + " grew from " + std::to_string(before) + " to " +
                     std::to_string(after) + " bytes after warm-up (tolerance " +
                     std::to_string(o_.memory_tolerance_bytes) + ")");
        };
        if (r_.warm.host_rss_bytes == 0)
            return; // the run ended before warm-up: nothing to compare
        grew("host RSS", r_.warm.host_rss_bytes, r_.end.host_rss_bytes);
        if (r_.warm.device_bytes && r_.end.device_bytes)
            grew("device memory in use", *r_.warm.device_bytes, *r_.end.device_bytes);
    }

    // Every request freed, every forward done, both sides flushed: idle.
    void teardown() {
        try {
            pair_.free_group_begin();
            for (const Request& r : running_)
                free_request(r);
            pair_.free_group_end(space_);
            running_.clear();
            events_.complete_all(space_);
            pair_.full().flush(space_, true);
            model_.second().flush(space_, true);
            pair_.check_invariants(space_);
        } catch (const Error& e) {
            return fail(std::string("teardown: ") + e.what());
        }
        check_idle(model_.full(), full_at_start_, r_.failures);
        check_idle(model_.second(), second_at_start_, r_.failures);
    }

    // ---------------------------------------------------------------- helpers
    MemorySample sample_memory() const {
        return {host_rss_bytes(), device_bytes_in_use<ExecutionSpace>()};
    }
    StampLayout full_stamps() const { return {model_.full().geometry().spec.entry_bytes, 0}; }
    StampLayout second_stamps() const { return {model_.second().geometry().spec.entry_bytes, 1}; }

    void fail(std::string what) { r_.failures.push_back(std::move(what)); }
    bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
    index_t uniform(index_t lo, index_t hi) {
        return std::uniform_int_distribution<index_t>(lo, hi)(rng_);
    }
    index_t round_to_page(index_t tokens) const { return tokens / o_.page_size * o_.page_size; }
    static index_t round_up(index_t n, index_t step) { return (n + step - 1) / step * step; }

    SoakOptions o_;
    ExecutionSpace space_;
    Model model_;
    typename Model::pair_type& pair_;
    ForwardEvents<ExecutionSpace> events_;
    std::mt19937_64 rng_;
    index_t window_tokens_, max_prompt_, max_output_;
    DeviceIds<ExecutionSpace> ids_;
    AllocatorOccupancy full_at_start_, second_at_start_; // the idle values teardown returns to
    std::vector<Request> running_;
    std::vector<index_t> new_tokens_, new_slots_, slots_, last_loc_host_, seq_lens_, page_tokens_,
        live_;
    SoakResult r_;
};

} // namespace kvpool::soak
