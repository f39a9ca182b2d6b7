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

    bool fits(const PoolDemand& demand) const override {
        const auto pages = [&](index_t tokens) { return (tokens + page_size() - 1) / page_size(); };
        return two_sided_fits(pair_.full().occupancy(), pages(demand.full_tokens),
                              pair_.swa().occupancy(), pages(demand.window_tokens));
    }

    bool prefill(RequestKv& kv, index_t tokens) override { return this->extend_fresh(kv, tokens); }

    void release(RequestKv& kv) override {
        this->free_pages(kv);
        kv = RequestKv{};
    }

    void release_window(RequestKv& kv, index_t pages) override {
        this->free_window_pages(kv, pages);
    }
};

} // namespace kvpool::sim
