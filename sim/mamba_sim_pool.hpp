// The scheduler's pool for a Mamba hybrid: a real UnifiedMambaAllocator (full
// KV paged, grows up; one state slot per request, page size 1, grows down)
// over one UnifiedKVPool.
#pragma once

#include "device_calls.hpp"
#include "sim_pool.hpp"
#include "two_sided_fit.hpp"

#include <kvpool/mamba_pair.hpp>

#include <utility>

namespace kvpool::sim {

template <class ExecutionSpace> class MambaSimPool final : public SimPool {
public:
    MambaSimPool(PoolLayout layout, CompactionMode mode, RealPageBytes real)
        : pool_(std::move(layout)), pair_(pool_, mode), mode_(mode), real_(real) {}

    index_t page_size() const override { return pair_.full().page_size(); }

    bool fits(const PoolDemand& demand) const override {
        const index_t full_pages = (demand.full_tokens + page_size() - 1) / page_size();
        return two_sided_fits(pair_.full().core(), full_pages, pair_.state().core(),
                              demand.state_slots);
    }

    bool prefill(RequestKv& kv, index_t tokens) override {
        const auto slot = calls_.timed([&] { return pair_.alloc_state_slots(calls_.space(), 1); });
        if (!slot)
            return false;
        const index_t slot_id = calls_.download(*slot)[0];
        const auto out = calls_.output(static_cast<std::size_t>(tokens));
        // A fresh request has no prefix, so its last-token location is never read.
        const auto last_loc = calls_.upload({unbound});
        if (!calls_.timed(
                [&] { return pair_.alloc_extend(calls_.space(), {0}, {tokens}, last_loc, out); })) {
            free_slot(slot_id);
            return false;
        }
        take_prefill_ids(kv, calls_.download(out), tokens, page_size());
        kv.state_slot = slot_id;
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
            pair_.free(calls_.space(), tokens);
            return 0;
        });
        if (kv.state_slot != unbound)
            free_slot(kv.state_slot);
        kv = RequestKv{};
    }

    void release_window(RequestKv&, index_t) override {
        throw Error(ErrorCode::invalid_state,
                    "release_window on a Mamba pool: the model has no sliding window");
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
        const auto& state = pair_.state().counters();
        PoolStats s;
        s.pages_moved = full.pages_moved + state.pages_moved;
        s.bytes_moved = static_cast<double>(full.pages_moved) * real_.first +
                        static_cast<double>(state.pages_moved) * real_.second;
        s.allocator_seconds = calls_.seconds();
        s.live_full_tokens = pair_.full().allocated_count();
        s.live_second_entries = pair_.state().allocated_count();
        s.pages_allocated = full.pages_allocated + state.pages_allocated;
        s.pages_freed = full.pages_freed + state.pages_freed;
        return s;
    }

    void check_invariants() const override { pair_.check_invariants(calls_.space()); }

private:
    void free_slot(index_t slot) {
        calls_.timed([&] {
            pair_.free_state_slots(calls_.space(), {slot});
            return 0;
        });
    }

    UnifiedKVPool<typename ExecutionSpace::memory_space> pool_;
    UnifiedMambaAllocator<ExecutionSpace> pair_;
    CompactionMode mode_;
    RealPageBytes real_;
    DeviceCalls<ExecutionSpace> calls_;
};

} // namespace kvpool::sim
