// C API: the Mamba pair (UnifiedMambaAllocator). Its per-side calls go through
// the side handles; the pair adds the state slot's cost and starvation.
#include "handles.hpp"

using namespace kvpool::capi;

namespace {

struct MambaHolder final : SideOwner {
    MambaHolder(std::shared_ptr<Pool> p, kvpool::CompactionMode mode, const std::string& full,
                const std::string& state)
        : pool(std::move(p)), pair(*pool, mode, full, state) {}
    std::shared_ptr<Pool> pool;
    MambaPair pair;
};

} // namespace

extern "C" {

kvpool_status kvpool_mamba_pair_create(kvpool_pool* pool, const char* full_name,
                                       const char* state_name, int lazy, kvpool_mamba_pair** out) {
    return guarded([&] {
        auto& p = deref(pool, "pool");
        require(full_name != nullptr && state_name != nullptr,
                "kvpool_mamba_pair_create: a side name is NULL");
        require(out != nullptr, "kvpool_mamba_pair_create: out is NULL");
        const auto mode = lazy ? kvpool::CompactionMode::lazy : kvpool::CompactionMode::eager;
        auto holder = std::make_shared<MambaHolder>(p.pool, mode, full_name, state_name);
        // The pair initialises its tables on the default instance; calls on
        // other streams must not overtake that.
        Space().fence();
        auto handle = std::make_unique<kvpool_mamba_pair>();
        handle->pair = &holder->pair;
        handle->owner = std::move(holder);
        handle->pool = p.pool;
        *out = handle.release();
    });
}

void kvpool_mamba_pair_destroy(kvpool_mamba_pair* pair) {
    delete pair;
}

kvpool_status kvpool_mamba_pair_side(kvpool_mamba_pair* pair, int which, kvpool_allocator** out) {
    return guarded([&] {
        MambaPair& p = *deref(pair, "pair").pair;
        require(which == 0 || which == 1,
                "kvpool_mamba_pair_side: which must be 0 (full) or 1 (state)");
        deref(out, "out") =
            new_side_handle(pair->owner, which == 0 ? p.full() : p.state(), pair->pool);
    });
}

kvpool_status kvpool_mamba_pair_sizes(const kvpool_mamba_pair* pair, kvpool_mamba_sizes* out) {
    return guarded([&] {
        const MambaPair& p = *deref(pair, "pair").pair;
        kvpool_mamba_sizes& s = deref(out, "out");
        s.available_size = p.available_size();
        s.state_slots_available = p.state_slots_available();
        s.state_slot_full_token_cost = p.state_slot_full_token_cost();
        s.state_slot_starved = p.state_slot_starved() ? 1 : 0;
    });
}

} // extern "C"
