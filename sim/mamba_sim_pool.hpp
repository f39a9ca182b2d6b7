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
    using Base::calls_;
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

    bool prefill(RequestKv& kv, index_t tokens) override {
        const auto slot = calls_.timed([&] { return pair_.alloc_state_slots(calls_.space(), 1); });
        if (!slot)
            return false;
        const index_t slot_id = calls_.download(*slot)[0];
        if (!this->extend_fresh(kv, tokens)) {
            free_slot(slot_id);
            return false;
        }
        kv.state_slot = slot_id;
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

private:
    void free_slot(index_t slot) {
        calls_.timed([&] {
            pair_.free_state_slots(calls_.space(), {slot});
            return 0;
        });
    }
};

} // namespace kvpool::sim
