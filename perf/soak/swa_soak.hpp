// The soak of an SWA pair at the peer's geometry: a seeded scheduler loop of
// engine-style calls (prefill batches with alloc_extend, decode steps with
// alloc_decode, finished requests freed, window-expired tokens released with
// free_swa, forward events, opportunistic flushes at idle points), with
// out-of-room handled as an engine does: admission waits, a decode that
// finds no room retracts the newest request. Each allocator call counts as
// one operation. Checks: invariants and stamped data every check_every
// operations and at the end, memory after warm-up against the end, and every
// side back to idle after teardown.
#pragma once

#include "forward_events.hpp"
#include "idle_checks.hpp"
#include "memory_probe.hpp"
#include "requests.hpp"
#include "soak_result.hpp"
#include "stamps.hpp"

#include <kvpool/swa_pair.hpp>

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

namespace kvpool::soak {

// The peer's SWA geometry (peer-baseline.md): 32 layers x 8 KV heads x
// head_dim 128, bf16, K and V: 128 KiB per token per side.
constexpr index_t swa_bytes_per_token = 32 * 8 * 128 * 2 * 2;

inline PoolLayout swa_soak_layout(index_t tokens_per_side, index_t page_size) {
    // Both sides' tokens plus one page of sink for each.
    const index_t bytes = 2 * (tokens_per_side + page_size) * swa_bytes_per_token;
    return PoolLayout(bytes, {{"full", swa_bytes_per_token, page_size, GrowDirection::up, 0},
                              {"swa", swa_bytes_per_token, page_size, GrowDirection::down, 0}});
}

template <class ExecutionSpace> class SwaSoak {
    using Pair = UnifiedSWAAllocator<ExecutionSpace>;
    using index_view = typename Pair::index_view;
    using swa_physical_view = kk::View<std::int32_t*, typename ExecutionSpace::memory_space>;

public:
    explicit SwaSoak(const SoakOptions& options)
        : o_(options), pool_(swa_soak_layout(o_.tokens_per_side, o_.page_size)),
          pair_(pool_, o_.mode), rng_(o_.seed),
          window_tokens_(
              round_to_page(std::clamp<index_t>(o_.tokens_per_side / 16, 4 * o_.page_size, 4096))),
          max_prompt_(std::clamp<index_t>(o_.tokens_per_side / 16, o_.page_size, 4096)),
          max_output_(std::clamp<index_t>(o_.tokens_per_side / 32, 8, 1024)),
          ids_in_(device_ids("kvpool_soak::ids_in")), ids_out_(device_ids("kvpool_soak::ids_out")),
          physical_full_(device_ids("kvpool_soak::physical_full")),
          physical_swa_(kk::uninitialized<swa_physical_view>("kvpool_soak::physical_swa",
                                                             full_capacity_tokens())) {
        r_.options = o_;
        r_.backend = ExecutionSpace::name();
        r_.buffer_bytes = pool_.layout().total_bytes();
        full_at_start_ = pair_.full().occupancy();
        swa_at_start_ = pair_.swa().occupancy();
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
        r_.pages_moved = pair_.full().counters().pages_moved + pair_.swa().counters().pages_moved;
        r_.bytes_moved = pair_.full().counters().bytes_moved + pair_.swa().counters().bytes_moved;
        teardown();
        return r_;
    }

private:
    // ---------------------------------------------------------------- one scheduler step
    void step() {
        ++r_.steps;
        events_.complete_older();
        new_tokens_.clear();
        if (running_.empty() || chance(0.6))
            admit();
        decode();
        forward();
        finish_requests();
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
        const index_view out = slice(ids_out_, total);
        last_loc_host_.assign(batch, unbound); // fresh requests: never read
        bool ok = try_extend(lengths, out);
        if (!ok && running_.empty()) {
            // Nothing runs: once the forwards are done, an empty pool must take it.
            events_.complete_all(space_);
            ok = try_extend(lengths, out);
            if (!ok)
                return fail("an idle pool refused a prefill batch of " + std::to_string(total) +
                            " tokens");
        }
        if (!ok) {
            ++r_.admission_waits;
            return;
        }
        const auto& ids = download(out);
        auto first = ids.begin();
        for (index_t n : lengths) {
            Request r;
            r.tokens.assign(first, first + static_cast<std::ptrdiff_t>(n));
            r.target_tokens = n + uniform(1, max_output_);
            running_.push_back(std::move(r));
            first += static_cast<std::ptrdiff_t>(n);
        }
        new_tokens_.insert(new_tokens_.end(), ids.begin(), ids.end());
        r_.requests_admitted += static_cast<index_t>(batch);
    }

    bool try_extend(const std::vector<index_t>& lengths, const index_view& out) {
        ++r_.ops;
        return pair_.alloc_extend(space_, std::vector<index_t>(lengths.size(), 0), lengths,
                                  upload(last_loc_host_), out);
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
            const index_view out = slice(ids_out_, static_cast<index_t>(running_.size()));
            ++r_.ops;
            if (pair_.alloc_decode(space_, seq_lens_, upload(last_loc_host_), out)) {
                const auto& ids = download(out);
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

    // The forward writes the new tokens' KV (the stamps) on both sides and
    // reads every page: its event guards both.
    void forward() {
        if (new_tokens_.empty())
            return;
        const auto n = static_cast<index_t>(new_tokens_.size());
        const index_view ids = upload_into(ids_in_, new_tokens_);
        const index_view full = slice(physical_full_, n);
        const auto swa = slice(physical_swa_, n);
        pair_.translate_full(space_, ids, full);
        pair_.translate_swa(space_, ids, swa);
        r_.ops += 2;
        stamp_tokens(space_, pool_.bytes(), full_stamps(), ids, full, n);
        stamp_tokens(space_, pool_.bytes(), swa_stamps(), ids, swa, n);
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
            return fail(std::string("check_invariants after ") + std::to_string(r_.ops) +
                        " operations: " + e.what());
        }
        live_.clear();
        for (const Request& r : running_)
            live_.insert(live_.end(), r.tokens.begin(), r.tokens.end());
        check_stamps("full", live_, full_stamps(), physical_full_,
                     [&](const index_view& ids, const index_view& out) {
                         pair_.translate_full(space_, ids, out);
                     });
        live_.clear();
        for (const Request& r : running_)
            append_window_tokens(r, o_.page_size, live_);
        check_stamps("swa", live_, swa_stamps(), physical_swa_,
                     [&](const index_view& ids, const swa_physical_view& out) {
                         pair_.translate_swa(space_, ids, out);
                     });
    }

    template <class PhysicalView, class Translate>
    void check_stamps(const char* side, const std::vector<index_t>& tokens,
                      const StampLayout& layout, const PhysicalView& physical,
                      Translate&& translate) {
        if (tokens.empty())
            return;
        const auto n = static_cast<index_t>(tokens.size());
        const index_view ids = upload_into(ids_in_, tokens);
        const PhysicalView out = slice(physical, n);
        translate(ids, out);
        const index_t bad = count_bad_stamps(space_, pool_.bytes(), layout, ids, out, n);
        r_.tokens_checked += n;
        if (bad > 0)
            fail(std::string("data check after ") + std::to_string(r_.ops) +
                 " operations: " + std::to_string(bad) + " stamp words of " + std::to_string(n) +
                 " live " + side + " tokens not found through translate");
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
            pair_.swa().flush(space_, true);
            pair_.check_invariants(space_);
        } catch (const Error& e) {
            return fail(std::string("teardown: ") + e.what());
        }
        check_idle(pair_.full(), full_at_start_, r_.failures);
        check_idle(pair_.swa(), swa_at_start_, r_.failures);
    }

    // ---------------------------------------------------------------- helpers
    MemorySample sample_memory() const {
        return {host_rss_bytes(), device_bytes_in_use<ExecutionSpace>()};
    }
    StampLayout full_stamps() const { return {swa_bytes_per_token, 0}; }
    StampLayout swa_stamps() const { return {swa_bytes_per_token, 1}; }

    void fail(std::string what) { r_.failures.push_back(std::move(what)); }
    bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
    index_t uniform(index_t lo, index_t hi) {
        return std::uniform_int_distribution<index_t>(lo, hi)(rng_);
    }
    index_t round_to_page(index_t tokens) const { return tokens / o_.page_size * o_.page_size; }
    static index_t round_up(index_t n, index_t step) { return (n + step - 1) / step * step; }

    // Buffers of the full side's capacity (which exceeds tokens_per_side once
    // free_swa has released SWA pages), made once: no call needs more, and the
    // soak's own allocations stay out of the memory it watches.
    std::size_t full_capacity_tokens() const {
        return static_cast<std::size_t>(pair_.full().geometry().page_capacity() * o_.page_size);
    }
    index_view device_ids(const char* label) const {
        return kk::uninitialized<index_view>(label, full_capacity_tokens());
    }
    template <class View> static View slice(const View& view, index_t n) {
        if (static_cast<std::size_t>(n) > view.extent(0))
            throw Error(ErrorCode::invalid_argument, "kvpool-soak: " + std::to_string(n) +
                                                         " ids exceed the buffer " + view.label() +
                                                         " of " + std::to_string(view.extent(0)));
        return Kokkos::subview(view, std::make_pair(std::size_t(0), static_cast<std::size_t>(n)));
    }
    index_view upload_into(const index_view& buffer, const std::vector<index_t>& host) {
        const index_view ids = slice(buffer, static_cast<index_t>(host.size()));
        Kokkos::deep_copy(space_, ids,
                          kk::UnmanagedHostView<const index_t*>(host.data(), host.size()));
        return ids;
    }
    index_view upload(const std::vector<index_t>& host) { return upload_into(ids_in_, host); }
    const std::vector<index_t>& download(const index_view& ids) {
        downloaded_.resize(ids.extent(0));
        Kokkos::deep_copy(
            space_, kk::UnmanagedHostView<index_t*>(downloaded_.data(), downloaded_.size()), ids);
        space_.fence();
        return downloaded_;
    }

    SoakOptions o_;
    ExecutionSpace space_;
    UnifiedKVPool<typename ExecutionSpace::memory_space> pool_;
    Pair pair_;
    ForwardEvents<ExecutionSpace> events_;
    std::mt19937_64 rng_;
    index_t window_tokens_, max_prompt_, max_output_;
    index_view ids_in_, ids_out_, physical_full_;
    swa_physical_view physical_swa_;
    SideOccupancy full_at_start_, swa_at_start_; // the idle values teardown returns to
    std::vector<Request> running_;
    std::vector<index_t> new_tokens_, last_loc_host_, seq_lens_, page_tokens_, live_, downloaded_;
    SoakResult r_;
};

} // namespace kvpool::soak
