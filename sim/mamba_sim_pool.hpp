// The scheduler's pool for a Mamba hybrid: a real UnifiedMambaAllocator (full
// KV side grows up, page-size-1 state slots grow down) over one UnifiedKVPool;
// each running request holds one state slot.
#pragma once

#include "pair_sim_pool.hpp"
#include "two_sided_fit.hpp"

#include <kvpool/mamba_pair.hpp>

namespace kvpool::sim {

template <class ExecutionSpace>
class MambaSimPool final : public PairSimPool<ExecutionSpace, UnifiedMambaAllocator<ExecutionSpace>,
                                              MambaSimPool<ExecutionSpace>> {
    using Base = PairSimPool<ExecutionSpace, UnifiedMambaAllocator<ExecutionSpace>,
                             MambaSimPool<ExecutionSpace>>;
    using Base::pair_;

public:
    using Base::Base;
    using Base::page_size;

    const MultiEndedAllocator<ExecutionSpace>& second_side() const { return pair_.state(); }

    bool fits(const PoolDemand& demand) const override {
        const index_t full_pages = (demand.full_tokens + page_size() - 1) / page_size();
        return two_sided_fits(pair_.full().occupancy(), full_pages, pair_.state().occupancy(),
                              demand.state_slots);
    }

    bool prefill(RequestKv& kv, const std::vector<index_t>& prefix_pages, index_t tokens) override {
        return this->prefill_with_state_slot(kv, prefix_pages, tokens);
    }

    void release(RequestKv& kv) override { this->release_with_state_slot(kv); }

    void release_window(RequestKv&, index_t) override {
        throw Error(ErrorCode::invalid_state,
                    "release_window on a Mamba pool: the model has no sliding window");
    }

    void release_pages(const std::vector<index_t>& pages) override { this->free_page_ids(pages); }
    void release_window_pages(const std::vector<index_t>&) override {
        throw Error(ErrorCode::invalid_state,
                    "release_window_pages on a Mamba pool: the model has no sliding window");
    }
    void release_state_slot(index_t slot) override { this->free_state_slot(slot); }
};

} // namespace kvpool::sim
