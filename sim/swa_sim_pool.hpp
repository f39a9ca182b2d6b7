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
    using Base::calls_;
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
};

} // namespace kvpool::sim
