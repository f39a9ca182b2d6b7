// What the SWA and the Mamba pair's handles share: the pair and its pool, kept
// alive by the pair's handle and by every handle on one of its sides.
#pragma once

#include "handles.hpp"

namespace kvpool::capi {

template <class Pair> struct PairHolder final : SideOwner {
    PairHolder(std::shared_ptr<Pool> p, const AllocatorOptions& first_options,
               const AllocatorOptions& second_options, const std::string& first,
               const std::string& second)
        : pool(std::move(p)), pair(*pool, first_options, second_options, first, second) {}
    std::shared_ptr<Pool> pool;
    Pair pair;
};

template <class Pair> struct PairHandle {
    LiveHandle live;
    std::shared_ptr<PairHolder<Pair>> holder;
};

// The pair of pool's sides first and second, each with its options (the pair
// sets their id roles).
template <class Handle>
void create_pair(kvpool_pool* pool, const char* first, const char* second,
                 const kvpool_side_options* first_options,
                 const kvpool_side_options* second_options, Handle** out) {
    auto& p = deref(pool, "pool");
    require(first != nullptr && second != nullptr, "a pair's side name is NULL");
    require(out != nullptr, "out is NULL");
    auto handle = std::make_unique<Handle>();
    handle->holder = std::make_shared<typename decltype(handle->holder)::element_type>(
        p.pool, options_of(first_options), options_of(second_options), first, second);
    // The pair initialises its tables on the default instance; calls on other
    // streams must not overtake that.
    Space().fence();
    *out = handle.release();
}

template <class Handle> auto& pair_of(Handle* handle) {
    return deref(handle, "pair").holder->pair;
}

// A handle on side 0 (first) or 1 (second) of the pair.
template <class Handle>
kvpool_allocator* pair_side(Handle* handle, int which, Side& first, Side& second) {
    require(which == 0 || which == 1, "a pair's side is 0 or 1, not " + std::to_string(which));
    return new_side_handle(handle->holder, which == 0 ? first : second, handle->holder->pool);
}

// The pair's backup window, atomic across both sides.
template <class Handle> void backup_pair_state(Handle* handle, kvpool_pair_snapshot** out) {
    auto& pair = pair_of(handle);
    require(out != nullptr, "backup_state: out is NULL");
    auto snapshot = std::make_unique<kvpool_pair_snapshot>();
    snapshot->snapshot = pair.backup_state();
    *out = snapshot.release();
}
template <class Handle>
void restore_pair_state(Handle* handle, void* stream, const kvpool_pair_snapshot* snapshot) {
    pair_of(handle).restore_state(space_of(stream), deref(snapshot, "snapshot").snapshot);
}
template <class Handle>
void commit_pair_state(Handle* handle, const kvpool_pair_snapshot* snapshot) {
    pair_of(handle).commit_state(deref(snapshot, "snapshot").snapshot);
}

} // namespace kvpool::capi

struct kvpool_swa_pair : kvpool::capi::PairHandle<kvpool::capi::SwaPair> {};
struct kvpool_mamba_pair : kvpool::capi::PairHandle<kvpool::capi::MambaPair> {};
