// The scheduler's pool for a sliding-window model: a real UnifiedSWAAllocator
// (full side: id owner, grows up; sliding-window side: binds the same ids,
// grows down) over one UnifiedKVPool.
#pragma once

#include "device_calls.hpp"
#include "sim_pool.hpp"
#include "two_sided_fit.hpp"

#include <kvpool/swa_pair.hpp>

#include <utility>

namespace kvpool::sim {

template <class ExecutionSpace> class SwaSimPool final : public SimPool {
public:
    SwaSimPool(PoolLayout layout, CompactionMode mode, RealPageBytes real)
        : pool_(std::move(layout)), pair_(pool_, mode), mode_(mode), real_(real) {}

    index_t page_size() const override { return pair_.page_size(); }

    bool fits(const PoolDemand& demand) const override {
        const auto pages = [&](index_t tokens) { return (tokens + page_size() - 1) / page_size(); };
        return two_sided_fits(pair_.full().core(), pages(demand.full_tokens), pair_.swa().core(),
                              pages(demand.window_tokens));
    }

    bool prefill(RequestKv& kv, index_t tokens) override {
        const auto out = calls_.output(static_cast<std::size_t>(tokens));
        // A fresh request has no prefix, so its last-token location is never read.
        const auto last_loc = calls_.upload({unbound});
        if (!calls_.timed(
                [&] { return pair_.alloc_extend(calls_.space(), {0}, {tokens}, last_loc, out); }))
            return false;
        take_prefill_ids(kv, calls_.download(out), tokens, page_size());
        return true;
    }

    bool decode(const std::vector<RequestKv*>& batch) override {
        std::vector<index_t> seq_lens, last;
        for (const RequestKv* kv : batch) {
            seq_lens.push_back(kv->tokens + 1);
            last.push_back(last_token(*kv, page_size()));
        }
        const auto out = calls_.output(batch.size());
        const auto last_loc = calls_.upload(last);
        if (!calls_.timed(
                [&] { return pair_.alloc_decode(calls_.space(), seq_lens, last_loc, out); }))
            return false;
        take_decode_ids(batch, calls_.download(out), page_size());
        return true;
    }

    void release(RequestKv& kv) override {
        const auto tokens = page_tokens(kv, 0, page_size());
        calls_.timed([&] {
            pair_.free(calls_.space(), tokens); // skips pages already out of the window
            return 0;
        });
        kv = RequestKv{};
    }

    void release_window(RequestKv& kv, index_t pages) override {
        if (pages <= kv.window_released_pages)
            return;
        auto tokens = page_tokens(kv, kv.window_released_pages, page_size());
        tokens.resize(static_cast<std::size_t>(pages - kv.window_released_pages));
        calls_.timed([&] {
            pair_.free_swa(calls_.space(), tokens);
            return 0;
        });
        kv.window_released_pages = pages;
    }

    void begin_releases() override { pair_.free_group_begin(); }
    void end_releases() override {
        calls_.timed([&] {
            pair_.free_group_end(calls_.space());
            return 0;
        });
    }

    void idle_point() override {
        if (mode_ == CompactionMode::lazy)
            calls_.timed([&] { return pair_.flush_opportunistic(calls_.space()); });
    }

    PoolStats stats() const override {
        const auto& full = pair_.full().counters();
        const auto& swa = pair_.swa().counters();
        PoolStats s;
        s.pages_moved = full.pages_moved + swa.pages_moved;
        s.bytes_moved = static_cast<double>(full.pages_moved) * real_.first +
                        static_cast<double>(swa.pages_moved) * real_.second;
        s.allocator_seconds = calls_.seconds();
        s.live_full_tokens = pair_.full().allocated_count();
        s.live_second_entries = pair_.swa().allocated_count();
        s.pages_allocated = full.pages_allocated + swa.pages_allocated;
        s.pages_freed = full.pages_freed + swa.pages_freed;
        return s;
    }

    void check_invariants() const override { pair_.check_invariants(calls_.space()); }

private:
    UnifiedKVPool<typename ExecutionSpace::memory_space> pool_;
    UnifiedSWAAllocator<ExecutionSpace> pair_;
    CompactionMode mode_;
    RealPageBytes real_;
    DeviceCalls<ExecutionSpace> calls_;
};

} // namespace kvpool::sim
