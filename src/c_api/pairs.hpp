// What the handles of the SWA pair, the Mamba pair and the tri-pool share: the
// composite of sides and its pool, kept alive by the composite's handle and by
// every handle on one of its sides. "Pair" below stands for any of them.
#pragma once

#include "handles.hpp"

#include <cstddef>
#include <utility>

namespace kvpool::capi {

template <class Pair> struct PairHolder final : SideOwner {
    // The composite's constructor arguments after the pool: each side's
    // options, then each side's name.
    template <class... Args>
    explicit PairHolder(std::shared_ptr<Pool> p, const Args&... args)
        : pool(std::move(p)), pair(*pool, args...) {}
    std::shared_ptr<Pool> pool;
    Pair pair;
};

template <class Pair> struct PairHandle {
    LiveHandle live;
    std::shared_ptr<PairHolder<Pair>> holder;
};

template <class Handle, std::size_t N, std::size_t... I>
void create_pair(kvpool_pool* pool, const char* const (&names)[N],
                 const kvpool_side_options* const (&options)[N], Handle** out,
                 std::index_sequence<I...>) {
    auto& p = deref(pool, "pool");
    for (const char* name : names)
        require(name != nullptr, "a side name is NULL");
    require(out != nullptr, "out is NULL");
    auto handle = std::make_unique<Handle>();
    handle->holder = std::make_shared<typename decltype(handle->holder)::element_type>(
        p.pool, options_of(options[I])..., std::string(names[I])...);
    // The composite initialises its tables on the default instance; calls on
    // other streams must not overtake that.
    Space().fence();
    *out = handle.release();
}

// The composite of pool's sides names[i], each with options[i] (the composite
// sets their id roles), in the order its constructor takes them.
template <class Handle, std::size_t N>
void create_pair(kvpool_pool* pool, const char* const (&names)[N],
                 const kvpool_side_options* const (&options)[N], Handle** out) {
    create_pair(pool, names, options, out, std::make_index_sequence<N>());
}

template <class Handle> auto& pair_of(Handle* handle) {
    return deref(handle, "pair").holder->pair;
}

// A handle on side which (0, 1, ...: sides[which]) of the composite.
template <class Handle, std::size_t N>
kvpool_allocator* pair_side(Handle* handle, int which, Side* const (&sides)[N]) {
    require(which >= 0 && static_cast<std::size_t>(which) < N,
            "there is no side " + std::to_string(which) + " (the sides are 0 to " +
                std::to_string(N - 1) + ")");
    return new_side_handle(handle->holder, *sides[which], handle->holder->pool);
}

// The composite's backup window, atomic across its sides. Snapshot: the C
// handle that holds what the composite's backup_state() returns.
template <class Handle, class Snapshot> void backup_pair_state(Handle* handle, Snapshot** out) {
    auto& pair = pair_of(handle);
    require(out != nullptr, "backup_state: out is NULL");
    auto snapshot = std::make_unique<Snapshot>();
    snapshot->snapshot = pair.backup_state();
    *out = snapshot.release();
}
template <class Handle, class Snapshot>
void restore_pair_state(Handle* handle, void* stream, const Snapshot* snapshot) {
    pair_of(handle).restore_state(space_of(stream), deref(snapshot, "snapshot").snapshot);
}
template <class Handle, class Snapshot>
void commit_pair_state(Handle* handle, const Snapshot* snapshot) {
    pair_of(handle).commit_state(deref(snapshot, "snapshot").snapshot);
}

} // namespace kvpool::capi

struct kvpool_swa_pair : kvpool::capi::PairHandle<kvpool::capi::SwaPair> {};
struct kvpool_mamba_pair : kvpool::capi::PairHandle<kvpool::capi::MambaPair> {};
struct kvpool_mamba_swa : kvpool::capi::PairHandle<kvpool::capi::MambaSwa> {};
