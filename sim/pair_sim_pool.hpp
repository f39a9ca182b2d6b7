// What the sliding-window and the Mamba pools of the scheduler share: the
// unified pool and allocator pair they own, and the calls that go to the full
// side, or to both sides alike. Derived names its second side (second_side()).
#pragma once

#include "device_calls.hpp"
#include "sim_pool.hpp"

#include <kvpool/multi_ended_allocator.hpp>

#include <utility>
#include <vector>

namespace kvpool::sim {

template <class ExecutionSpace, class Pair, class Derived> class PairSimPool : public SimPool {
public:
    PairSimPool(PoolLayout layout, CompactionMode mode, RealPageBytes real)
        : pool_(std::move(layout)), pair_(pool_, mode), mode_(mode), real_(real) {}

    index_t page_size() const override { return pair_.full().page_size(); }

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
        const auto& second = static_cast<const Derived&>(*this).second_side().counters();
        PoolStats s;
        s.pages_moved = full.pages_moved + second.pages_moved;
        s.bytes_moved = static_cast<double>(full.pages_moved) * real_.first +
                        static_cast<double>(second.pages_moved) * real_.second;
        s.allocator_seconds = calls_.seconds();
        s.live_full_tokens = pair_.full().allocated_count();
        s.live_second_entries = static_cast<const Derived&>(*this).second_side().allocated_count();
        s.pages_allocated = full.pages_allocated + second.pages_allocated;
        s.pages_freed = full.pages_freed + second.pages_freed;
        return s;
    }

    void check_invariants() const override { pair_.check_invariants(calls_.space()); }

protected:
    // The tokens of a fresh request (no prefix) on the full side and its partner.
    bool extend_fresh(RequestKv& kv, index_t tokens) {
        const auto out = calls_.output(static_cast<std::size_t>(tokens));
        // A fresh request has no prefix, so its last-token location is never read.
        const auto last_loc = calls_.upload({unbound});
        if (!calls_.timed(
                [&] { return pair_.alloc_extend(calls_.space(), {0}, {tokens}, last_loc, out); }))
            return false;
        take_prefill_ids(kv, calls_.download(out), tokens, page_size());
        return true;
    }

    UnifiedKVPool<typename ExecutionSpace::memory_space> pool_;
    Pair pair_;
    CompactionMode mode_;
    RealPageBytes real_;
    DeviceCalls<ExecutionSpace> calls_;
};

} // namespace kvpool::sim
