// HybridReqToTokenPool under operations drawn from a seed or from a fuzzer's input, against a
// host model, in every mode of the extra buffer: request slots, Mamba and track state slots,
// adoption and donation of cached slots, row writes from the host and the device, clear, and
// misuse of every kind (a clear error that changes nothing). Shared by the randomised test and
// the req_table_fuzz target.
#pragma once

#include "req_table_test_support.hpp"
#include "test_random.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#ifndef KVPOOL_TEST_BACKEND_NAME
#define KVPOOL_TEST_BACKEND_NAME "backend"
#endif

namespace kvpool::test::req_table_run {

// The host model: FIFO free lists of request and state slots, what each
// request holds, the state slots the "prefix cache" holds, and the device
// table's contents (never reset, like the real one).
struct ModelRequest {
    index_t mamba = unbound;
    std::vector<index_t> tracks;
    index_t next_track = 0;
    std::vector<index_t> host_row;
};

struct RandomStats {
    long allocs = 0, failed_allocs = 0, adoptions = 0, finished = 0, kept = 0, donations = 0,
         on_demand = 0, writes = 0, rejected = 0, clears = 0;
    void add(const RandomStats& o) {
        allocs += o.allocs;
        failed_allocs += o.failed_allocs;
        adoptions += o.adoptions;
        finished += o.finished;
        kept += o.kept;
        donations += o.donations;
        on_demand += o.on_demand;
        writes += o.writes;
        rejected += o.rejected;
        clears += o.clears;
    }
};

struct RandomConfig {
    const char* name;
    HybridReqToTokenPoolOptions options;
};

// FNV-1a: portable, unlike std::hash, so a seed means the same run everywhere.
inline std::uint64_t name_hash(const std::string& name) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (const char c : name)
        h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return h;
}

class RandomRun {
public:
    static constexpr index_t num_reqs = 12, context = 24, num_states = 40;

    RandomRun(std::uint64_t seed, const RandomConfig& config, int ops)
        : RandomRun(seed, config, ops, Rng(seed ^ name_hash(config.name))) {}
    // Every decision drawn from input (a fuzzer's bytes): the run ends where the input does, and
    // the device rows are checked after every step.
    RandomRun(std::uint64_t seed, const RandomConfig& config, int ops, const Rng* input)
        : RandomRun(seed, config, ops, *input) {}

    void run() {
        for (step_ = 0; step_ < ops_ && !rng_.exhausted(); ++step_) {
            const double u = static_cast<double>(rng_.next() >> 11) * 0x1.0p-53;
            if (u < 0.18)
                op_alloc();
            else if (u < 0.30)
                op_finish();
            else if (u < 0.42)
                op_write();
            else if (u < 0.50)
                op_track();
            else if (u < 0.58)
                op_donate();
            else if (u < 0.64)
                op_lazy_fill();
            else if (u < 0.72)
                op_evict();
            else if (u < 0.92)
                op_misuse();
            else if (u < 0.925)
                op_clear();
            else
                op_write_batch();
            compare();
            if (rng_.from_input() || step_ % 16 == 0)
                check_device();
        }
        check_device();
    }
    const RandomStats& stats() const { return stats_; }

private:
    RandomRun(std::uint64_t seed, const RandomConfig& config, int ops, Rng rng)
        : seed_(seed), config_(config), ops_(ops), rng_(rng), states_(num_states),
          pool_(Space(), num_reqs, context, states_, config.options),
          columns_(config.options.enable_mamba_extra_buffer
                       ? config.options.mamba_ping_pong_track_buffer_size
                       : 0),
          device_(static_cast<std::size_t>(num_reqs + 1), std::vector<index_t>(context, 0)) {
        for (index_t s = 1; s <= num_reqs; ++s)
            free_reqs_.push_back(s);
        for (index_t s = 1; s <= num_states; ++s)
            free_states_.push_back(s);
    }

    bool extra() const { return columns_ > 0; }
    bool lazy() const { return config_.options.enable_mamba_extra_buffer_lazy; }

    [[noreturn]] void fail(const std::string& what) const {
        throw Mismatch(fmt::format(
            "req-table randomised mismatch: seed={} config={} step={} op=[{}]\n  {}\n  pool: {}\n"
            "  reproduce: kvpool_tests_{} \"[req-table][randomised]\" --kvpool-seed {}",
            seed_, config_.name, step_, op_, what, describe(pool_, states_),
            KVPOOL_TEST_BACKEND_NAME, seed_));
    }
    template <class A, class B>
    void expect_eq(const A& actual, const B& expected, const char* what) const {
        if (!(actual == expected))
            fail(fmt::format("{}: got {}, expected {}", what, actual, expected));
    }

    std::vector<index_t> take_states(std::size_t n) {
        std::vector<index_t> out(free_states_.begin(),
                                 free_states_.begin() + static_cast<std::ptrdiff_t>(n));
        free_states_.erase(free_states_.begin(),
                           free_states_.begin() + static_cast<std::ptrdiff_t>(n));
        return out;
    }
    void give_states(const std::vector<index_t>& slots) {
        for (const index_t s : slots)
            free_states_.push_back(s);
    }

    void op_alloc() {
        const index_t n = rng_.uniform(0, 4);
        // Now and then a request adopts a state slot taken from the cache.
        std::vector<index_t> adopt(static_cast<std::size_t>(n), unbound);
        if (n > 0 && !cache_.empty() && rng_.chance(0.3))
            adopt[0] = rng_.pick(cache_);
        op_ = fmt::format("alloc(mamba {})", adopt);
        const index_t first = lazy() ? 1 : columns_;
        const auto fresh =
            static_cast<index_t>(std::count(adopt.begin(), adopt.end(), unbound)) + n * first;
        const bool fits = n <= static_cast<index_t>(free_reqs_.size()) &&
                          (fresh == 0 || fresh <= static_cast<index_t>(free_states_.size()));
        const bool adopting = n > 0 && adopt[0] != unbound;
        const auto got =
            adopting ? pool_.alloc_adopting_mamba(Space(), adopt) : pool_.alloc(Space(), n);
        expect_eq(got.has_value(), fits, "allocation outcome");
        ++(fits ? stats_.allocs : stats_.failed_allocs);
        if (!fits)
            return;
        stats_.adoptions += adopting;
        std::vector<index_t> reqs(free_reqs_.begin(), free_reqs_.begin() + n);
        free_reqs_.erase(free_reqs_.begin(), free_reqs_.begin() + n);
        expect_eq(*got, reqs, "request slots");
        const std::vector<index_t> slots = take_states(static_cast<std::size_t>(fresh));
        std::size_t k = 0;
        for (index_t i = 0; i < n; ++i) {
            ModelRequest r;
            r.mamba = adopt[static_cast<std::size_t>(i)] != unbound
                          ? adopt[static_cast<std::size_t>(i)]
                          : slots[k++];
            if (adopt[static_cast<std::size_t>(i)] != unbound)
                cache_.erase(r.mamba);
            r.tracks.assign(static_cast<std::size_t>(columns_), unbound);
            for (index_t j = 0; j < first; ++j)
                r.tracks[static_cast<std::size_t>(j)] = slots[k++];
            live_[reqs[static_cast<std::size_t>(i)]] = r;
        }
    }

    // A finished request: free_mamba_cache (keeping a track slot for the
    // cache now and then), then free. Sometimes several at once.
    void op_finish() {
        if (live_.empty())
            return;
        std::vector<index_t> done{pick_live()};
        for (const auto& entry : live_)
            if (entry.first != done.front() && rng_.chance(0.2))
                done.push_back(entry.first);
        for (const index_t slot : done) {
            ModelRequest& r = live_[slot];
            if (r.mamba == unbound)
                continue;
            std::optional<index_t> keep;
            if (extra() && rng_.chance(0.6))
                keep = rng_.uniform(0, columns_ - 1);
            op_ = fmt::format("free_mamba_cache({}, keep {})", slot, keep ? *keep : -1);
            const index_t kept = pool_.free_mamba_cache(Space(), slot, keep);
            std::vector<index_t> freed{r.mamba};
            index_t expected_kept = unbound;
            for (index_t j = 0; j < columns_; ++j) {
                const index_t t = r.tracks[static_cast<std::size_t>(j)];
                if (keep && *keep == j)
                    expected_kept = t;
                else if (t != unbound)
                    freed.push_back(t);
            }
            expect_eq(kept, expected_kept, "kept track slot");
            give_states(freed);
            if (kept != unbound)
                cache_.insert(kept);
            stats_.kept += kept != unbound;
        }
        stats_.finished += static_cast<long>(done.size());
        op_ = fmt::format("free({})", done);
        pool_.free(done);
        for (const index_t slot : done) {
            live_.erase(slot);
            free_reqs_.push_back(slot);
        }
    }

    void op_write() {
        if (live_.empty())
            return;
        const index_t slot = pick_live();
        const index_t start = rng_.uniform(0, context);
        const index_t n = rng_.uniform(0, context - start);
        std::vector<index_t> ids(static_cast<std::size_t>(n));
        for (auto& id : ids)
            id = rng_.uniform(0, 1 << 20);
        const bool from_host = rng_.chance(0.5);
        op_ = fmt::format("write(slot {}, start {}, {} ids from the {})", slot, start, n,
                          from_host ? "host" : "device");
        if (from_host)
            pool_.write(Space(), slot, start, ids);
        else
            pool_.write(Space(), slot, start, to_device(ids));
        record(slot, start, ids, from_host);
        ++stats_.writes;
    }

    void op_write_batch() {
        if (live_.empty())
            return;
        std::vector<index_t> slots, starts, lengths, ids;
        for (const auto& entry : live_) {
            if (!rng_.chance(0.5))
                continue;
            const index_t start = rng_.uniform(0, context - 1);
            slots.push_back(entry.first);
            starts.push_back(start);
            lengths.push_back(rng_.uniform(0, std::min<index_t>(3, context - start)));
        }
        for (const index_t len : lengths)
            for (index_t i = 0; i < len; ++i)
                ids.push_back(rng_.uniform(0, 1 << 20));
        op_ = fmt::format("write(slots {}, starts {}, lengths {})", slots, starts, lengths);
        pool_.write(Space(), slots, starts, lengths, to_device(ids));
        std::size_t at = 0;
        for (std::size_t r = 0; r < slots.size(); ++r) {
            const std::vector<index_t> seg(ids.begin() + static_cast<std::ptrdiff_t>(at),
                                           ids.begin() + static_cast<std::ptrdiff_t>(at) +
                                               lengths[r]);
            record(slots[r], starts[r], seg, false);
            at += static_cast<std::size_t>(lengths[r]);
        }
        ++stats_.writes;
    }

    void record(index_t slot, index_t start, const std::vector<index_t>& ids, bool from_host) {
        auto& row = live_[slot].host_row;
        const auto end = static_cast<std::size_t>(start) + ids.size();
        if (!ids.empty() && row.size() < end)
            row.resize(end, unbound);
        for (std::size_t i = 0; i < ids.size(); ++i) {
            row[static_cast<std::size_t>(start) + i] = from_host ? ids[i] : unbound;
            device_[static_cast<std::size_t>(slot)][static_cast<std::size_t>(start) + i] = ids[i];
        }
    }

    // The scheduler's step: advance next_track_idx as normal mode swaps it.
    void op_track() {
        const index_t slot = pick_with_state();
        if (slot == unbound || !extra())
            return;
        const index_t idx = rng_.uniform(0, columns_ - 1);
        op_ = fmt::format("set_mamba_next_track_idx({}, {})", slot, idx);
        pool_.set_mamba_next_track_idx(slot, idx);
        live_[slot].next_track = idx;
    }

    void op_donate() {
        const index_t slot = pick_with_state();
        if (slot == unbound || !extra() || free_states_.empty())
            return;
        ModelRequest& r = live_[slot];
        const index_t keep =
            lazy() ? r.next_track : (columns_ == 2 ? 1 - r.next_track : r.next_track);
        const index_t fresh = states_.alloc(Space(), 1)->front();
        expect_eq(fresh, take_states(1).front(), "state slot for the donation");
        op_ = fmt::format("donate_mamba_ping_pong_slot({}, {}) [keep index {}]", slot, fresh, keep);
        expect_eq(pool_.get_mamba_ping_pong_keep_idx(slot), keep, "keep index");
        if (r.tracks[static_cast<std::size_t>(keep)] == unbound) {
            expect_rejected(ErrorCode::invalid_state,
                            [&] { (void)pool_.donate_mamba_ping_pong_slot(Space(), slot, fresh); });
            states_.free(Space(), {fresh});
            give_states({fresh});
            return;
        }
        expect_eq(pool_.donate_mamba_ping_pong_slot(Space(), slot, fresh),
                  r.tracks[static_cast<std::size_t>(keep)], "donated slot");
        cache_.insert(r.tracks[static_cast<std::size_t>(keep)]);
        r.tracks[static_cast<std::size_t>(keep)] = fresh;
        ++stats_.donations;
    }

    // Lazy mode: fill an empty track entry at a track boundary.
    void op_lazy_fill() {
        const index_t slot = pick_with_state();
        if (slot == unbound || !lazy())
            return;
        ModelRequest& r = live_[slot];
        const index_t idx = rng_.uniform(0, columns_ - 1);
        op_ = fmt::format("alloc_mamba_ping_pong_slot({}, {})", slot, idx);
        if (r.tracks[static_cast<std::size_t>(idx)] != unbound) {
            expect_rejected(ErrorCode::invalid_state,
                            [&] { (void)pool_.alloc_mamba_ping_pong_slot(Space(), slot, idx); });
            return;
        }
        const bool ok = pool_.alloc_mamba_ping_pong_slot(Space(), slot, idx);
        expect_eq(ok, !free_states_.empty(), "on-demand track slot");
        if (ok)
            r.tracks[static_cast<std::size_t>(idx)] = take_states(1).front();
        stats_.on_demand += ok;
    }

    // The prefix cache evicts: its slots go back to the state allocator.
    void op_evict() {
        if (cache_.empty())
            return;
        const index_t slot = rng_.pick(cache_);
        op_ = fmt::format("evict cached state slot {}", slot);
        states_.free(Space(), {slot});
        cache_.erase(slot);
        give_states({slot});
    }

    void op_clear() {
        op_ = "clear()";
        ++stats_.clears;
        pool_.clear(Space());
        live_.clear();
        cache_.clear();
        free_reqs_.clear();
        free_states_.clear();
        for (index_t s = 1; s <= num_reqs; ++s)
            free_reqs_.push_back(s);
        for (index_t s = 1; s <= num_states; ++s)
            free_states_.push_back(s);
    }

    // Misuse of every kind: must throw with the right code and change nothing.
    void op_misuse() {
        const index_t kind = rng_.uniform(0, 7);
        std::set<index_t> free_set(free_reqs_.begin(), free_reqs_.end());
        switch (kind) {
        case 0:
            if (free_set.empty())
                return;
            op_ = "free of a free request slot";
            return expect_rejected(ErrorCode::not_allocated,
                                   [&] { pool_.free(rng_.pick(free_set)); });
        case 1: {
            op_ = "free of the padding row or out of range";
            const index_t bad = rng_.pick(std::set<index_t>{0, -1, num_reqs + 1, 1 << 20});
            return expect_rejected(ErrorCode::out_of_range, [&] { pool_.free(bad); });
        }
        case 2: {
            const index_t slot = pick_with_state();
            if (slot == unbound)
                return;
            op_ = fmt::format("free({}) before free_mamba_cache", slot);
            return expect_rejected(ErrorCode::invalid_state,
                                   [&] { pool_.free(std::vector<index_t>{slot}); });
        }
        case 3:
            if (live_.empty())
                return;
            op_ = "free_mamba_cache of a request without state";
            for (const auto& [slot, r] : live_)
                if (r.mamba == unbound)
                    return expect_rejected(ErrorCode::not_allocated, [&, s = slot] {
                        (void)pool_.free_mamba_cache(Space(), s);
                    });
            if (free_set.empty())
                return;
            return expect_rejected(ErrorCode::not_allocated, [&] {
                (void)pool_.free_mamba_cache(Space(), rng_.pick(free_set));
            });
        case 4: {
            if (live_.empty())
                return;
            const index_t slot = pick_live();
            const index_t start = rng_.uniform(context - 2, context + 2);
            op_ = fmt::format("write past the row end at {}", start);
            return expect_rejected(ErrorCode::out_of_range, [&] {
                pool_.write(Space(), slot, start, std::vector<index_t>{1, 2, 3});
            });
        }
        case 5: {
            // Frees that keep a request's state in the request table: the
            // engine releases the state of a request it keeps (e.g. a retract).
            const index_t slot = pick_with_state();
            if (slot == unbound)
                return;
            op_ = fmt::format("free_mamba_cache({}) keeping the request slot", slot);
            ModelRequest& r = live_[slot];
            std::vector<index_t> freed{r.mamba};
            for (const index_t t : r.tracks)
                if (t != unbound)
                    freed.push_back(t);
            expect_eq(pool_.free_mamba_cache(Space(), slot), unbound,
                      "kept slot without a keep index");
            give_states(freed);
            r.mamba = unbound;
            r.tracks.assign(static_cast<std::size_t>(columns_), unbound);
            r.next_track = 0;
            return;
        }
        case 6: {
            // Donating or adopting a slot a request already holds.
            const index_t slot = pick_with_state();
            if (slot == unbound || !extra())
                return;
            const index_t other = pick_with_state();
            op_ = fmt::format("donate to {} the Mamba slot of {}", slot, other);
            const ModelRequest& r = live_[slot];
            const index_t keep =
                lazy() ? r.next_track : (columns_ == 2 ? 1 - r.next_track : r.next_track);
            const bool empty = r.tracks[static_cast<std::size_t>(keep)] == unbound;
            return expect_rejected(
                empty ? ErrorCode::invalid_state : ErrorCode::invalid_argument, [&] {
                    (void)pool_.donate_mamba_ping_pong_slot(Space(), slot, live_[other].mamba);
                });
        }
        default: {
            if (live_.empty())
                return;
            const index_t slot = pick_live();
            op_ = fmt::format("free of {} twice in one call", slot);
            return expect_rejected(live_[slot].mamba != unbound ? ErrorCode::invalid_state
                                                                : ErrorCode::not_allocated,
                                   [&] {
                                       pool_.free(std::vector<index_t>{slot, slot});
                                   });
        }
        }
    }

    template <class F> void expect_rejected(ErrorCode code, F&& call) {
        const std::string before = describe(pool_, states_);
        try {
            call();
            fail("accepted");
        } catch (const Error& e) {
            if (e.code() != code)
                fail(fmt::format("error code {} ({}), expected {}", to_string(e.code()), e.what(),
                                 to_string(code)));
        }
        expect_eq(describe(pool_, states_), before, "state after a rejected call");
        ++stats_.rejected;
    }

    index_t pick_live() {
        std::set<index_t> slots;
        for (const auto& entry : live_)
            slots.insert(entry.first);
        return rng_.pick(slots);
    }
    index_t pick_with_state() {
        std::set<index_t> slots;
        for (const auto& [slot, r] : live_)
            if (r.mamba != unbound)
                slots.insert(slot);
        return slots.empty() ? unbound : rng_.pick(slots);
    }

    void compare() {
        expect_eq(pool_.available_size(), static_cast<index_t>(free_reqs_.size()),
                  "available_size");
        expect_eq(states_.available_size(), static_cast<index_t>(free_states_.size()),
                  "free state slots");
        for (index_t s = 1; s <= num_reqs; ++s) {
            const auto it = live_.find(s);
            expect_eq(pool_.is_allocated(s), it != live_.end(), "is_allocated");
            if (it == live_.end())
                continue;
            const ModelRequest& r = it->second;
            expect_eq(pool_.mamba_slot(s), r.mamba, "Mamba slot");
            expect_eq(pool_.host_row(s), r.host_row, "host row");
            if (!extra())
                continue;
            expect_eq(pool_.mamba_ping_pong_track_buffer(s), r.tracks, "track slots");
            if (r.mamba != unbound)
                expect_eq(pool_.mamba_next_track_idx(s), r.next_track, "next track index");
        }
    }

    void check_device() {
        try {
            pool_.check_invariants(Space());
        } catch (const Error& e) {
            fail(e.what());
        }
        for (index_t s = 0; s <= num_reqs; ++s)
            expect_eq(device_row(pool_.req_to_token(), s), device_[static_cast<std::size_t>(s)],
                      "device row");
    }

    std::uint64_t seed_;
    RandomConfig config_;
    int ops_;
    Rng rng_;
    FreeListStates states_;
    Hybrid pool_;
    index_t columns_;
    std::deque<index_t> free_reqs_;
    std::deque<index_t> free_states_;
    std::map<index_t, ModelRequest> live_;
    std::set<index_t> cache_;
    std::vector<std::vector<index_t>> device_;
    int step_ = 0;
    std::string op_ = "initial state";
    RandomStats stats_;
};

// The extra buffer's modes.
inline std::vector<RandomConfig> all_configs() {
    return {
        {"no-extra-buffer", {}},
        {"normal-2", extra_buffer(false, 2)},
        {"normal-1", extra_buffer(false, 1)},
        {"lazy-2", extra_buffer(true, 2)},
    };
}

} // namespace kvpool::test::req_table_run
