// The scheduler's pool for a model with full-attention, sliding-window and
// Mamba layers: a real UnifiedMambaSWAAllocator (state slots grow up from the
// low end, full KV down from the high end, the sliding-window KV floats
// between them) over one UnifiedKVPool. A running request holds its KV on
// both KV sides and one state slot.
#pragma once

#include "pair_sim_pool.hpp"
#include "tri_pool_fit.hpp"

#include <kvpool/mamba_swa_allocator.hpp>

namespace kvpool::sim {

template <class ExecutionSpace>
class TriSimPool final
    : public PairSimPool<ExecutionSpace, UnifiedMambaSWAAllocator<ExecutionSpace>,
                         TriSimPool<ExecutionSpace>> {
    using Base = PairSimPool<ExecutionSpace, UnifiedMambaSWAAllocator<ExecutionSpace>,
                             TriSimPool<ExecutionSpace>>;
    using Base::pair_;
    using Base::real_;

public:
    using Base::Base;
    using Base::page_size;

    const MultiEndedAllocator<ExecutionSpace>& second_side() const { return pair_.swa(); }

    index_t window_page_size() const override { return pair_.swa().page_size(); }

    // A full page binds all its sliding-window pages: window tokens count in full pages.
    bool fits(const PoolDemand& demand) const override {
        const auto pages = [&](index_t tokens) { return (tokens + page_size() - 1) / page_size(); };
        return tri_pool_fits(pair_.state().occupancy(), demand.state_slots, pair_.swa().occupancy(),
                             pages(demand.window_tokens) * (page_size() / window_page_size()),
                             pair_.full().occupancy(), pages(demand.full_tokens));
    }

    bool prefill(RequestKv& kv, const std::vector<index_t>& prefix_pages, index_t tokens) override {
        return this->prefill_with_state_slot(kv, prefix_pages, tokens);
    }

    void release(RequestKv& kv) override { this->release_with_state_slot(kv); }

    void release_window(RequestKv& kv, index_t window_pages) override {
        this->free_window_pages(kv, window_pages);
    }

    void release_pages(const std::vector<index_t>& pages) override { this->free_page_ids(pages); }
    void release_window_pages(const std::vector<index_t>& pages) override {
        this->free_window_page_ids(pages);
    }
    void release_state_slot(index_t slot) override { this->free_state_slot(slot); }

    // The KV sides' figures, and the state slots' as the third side.
    PoolStats stats() const override {
        PoolStats s = Base::stats();
        const auto& state = pair_.state().counters();
        s.pages_moved += state.pages_moved;
        s.bytes_moved += static_cast<double>(state.pages_moved) * real_.third;
        s.live_third_entries = pair_.state().allocated_count();
        s.pages_allocated += state.pages_allocated;
        s.pages_freed += state.pages_freed;
        return s;
    }
};

} // namespace kvpool::sim
