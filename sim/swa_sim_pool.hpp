// The scheduler's pool for a sliding-window model: a real UnifiedSWAAllocator
// (full side: id owner, grows up; sliding-window side: binds the same ids,
// grows down) over one UnifiedKVPool.
#pragma once

#include "pair_sim_pool.hpp"
#include "two_sided_fit.hpp"

#include <kvpool/swa_pair.hpp>

namespace kvpool::sim {

template <class ExecutionSpace>
class SwaSimPool final : public PairSimPool<ExecutionSpace, UnifiedSWAAllocator<ExecutionSpace>,
                                            SwaSimPool<ExecutionSpace>> {
    using Base = PairSimPool<ExecutionSpace, UnifiedSWAAllocator<ExecutionSpace>,
                             SwaSimPool<ExecutionSpace>>;
    using Base::pair_;

public:
    using Base::Base;
    using Base::page_size;

    const MultiEndedAllocator<ExecutionSpace>& second_side() const { return pair_.swa(); }

    index_t window_page_size() const override { return pair_.swa().page_size(); }

    // A full page binds all its sliding-window pages: window tokens count in full pages.
    bool fits(const PoolDemand& demand) const override {
        const auto pages = [&](index_t tokens) { return (tokens + page_size() - 1) / page_size(); };
        return two_sided_fits(pair_.full().occupancy(), pages(demand.full_tokens),
                              pair_.swa().occupancy(),
                              pages(demand.window_tokens) * (page_size() / window_page_size()));
    }

    bool prefill(RequestKv& kv, const std::vector<index_t>& prefix_pages, index_t tokens) override {
        return this->extend(kv, prefix_pages, tokens);
    }

    void release(RequestKv& kv) override {
        this->free_pages(kv);
        kv = RequestKv{};
    }

    void release_window(RequestKv& kv, index_t window_pages) override {
        this->free_window_pages(kv, window_pages);
    }

    void release_pages(const std::vector<index_t>& pages) override { this->free_page_ids(pages); }
    void release_window_pages(const std::vector<index_t>& pages) override {
        this->free_window_page_ids(pages);
    }
    void release_state_slot(index_t) override {
        throw Error(ErrorCode::invalid_state,
                    "release_state_slot on a sliding-window pool: the model has no Mamba state");
    }
};

} // namespace kvpool::sim
