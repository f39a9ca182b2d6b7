// What the handles of the SWA pair, the Mamba pair and the tri-pool share: the
// composite of sides and its pool, kept alive by the composite's handle and by
// every handle on one of its sides. "Pair" below stands for any of them.
#pragma once

#include "handles.hpp"

#include <kvpool/eviction.hpp>

#include <cstddef>
#include <utility>

namespace kvpool::capi {

template <class S, template <class> class Pair> struct PairHolder final : SideOwner {
    // The composite's constructor arguments after the pool: each side's
    // options, then each side's name.
    template <class... Args>
    explicit PairHolder(std::shared_ptr<PoolOn<S>> p, const Args&... args)
        : pool(std::move(p)), pair(*pool, args...) {}
    std::shared_ptr<PoolOn<S>> pool;
    Pair<S> pair;
};

// Pair: the composite's class template over the execution space.
template <template <class> class Pair> struct PairHandle {
    template <class S> struct Ref : OnSpace<S> {
        std::shared_ptr<PairHolder<S, Pair>> holder;
    };
    LiveHandle live;
    OnEachSpace<Ref> on;
};

template <class Handle, std::size_t N, std::size_t... I>
void create_pair(kvpool_unified_kv_pool* pool, const char* const (&names)[N],
                 const kvpool_allocator_options* const (&options)[N], Handle** out,
                 std::index_sequence<I...>) {
    std::visit(
        [&](auto& p) {
            using S = typename std::decay_t<decltype(p)>::execution_space;
            using Ref = typename Handle::template Ref<S>;
            for (const char* name : names)
                require(name != nullptr, "a side name is NULL");
            require(out != nullptr, "out is NULL");
            auto handle = std::make_unique<Handle>();
            Ref ref;
            ref.holder = std::make_shared<typename decltype(ref.holder)::element_type>(
                p.pool, options_of(options[I])..., std::string(names[I])...);
            handle->on = std::move(ref);
            // The composite initialises its tables on the default instance; calls on
            // other streams must not overtake that.
            S().fence();
            *out = handle.release();
        },
        deref(pool, "pool").on);
}

// The composite of pool's sides names[i], each with options[i] (the composite
// sets their id roles), in the order its constructor takes them.
template <class Handle, std::size_t N>
void create_pair(kvpool_unified_kv_pool* pool, const char* const (&names)[N],
                 const kvpool_allocator_options* const (&options)[N], Handle** out) {
    create_pair(pool, names, options, out, std::make_index_sequence<N>());
}

// Runs f(pair, ref) on the composite, typed for its space, inside guarded().
template <class Handle, class F> kvpool_status on_pair(Handle* handle, F&& f) {
    return on(handle, "pair", [&](auto& ref) { f(ref.holder->pair, ref); });
}

// A handle on side which (0, 1, ...: sides[which]) of the composite.
template <class Ref, class Side, std::size_t N>
kvpool_multi_ended_allocator* pair_side(const Ref& ref, int which, Side* const (&sides)[N]) {
    require(which >= 0 && static_cast<std::size_t>(which) < N,
            "there is no side " + std::to_string(which) + " (the sides are 0 to " +
                std::to_string(N - 1) + ")");
    return new_side_handle(ref.holder, *sides[which], ref.holder->pool);
}

// The composite's backup window, atomic across its sides. Snapshot: the C
// handle that holds what the composite's backup_state() returns.
template <class Handle, class Snapshot>
kvpool_status backup_pair_state(Handle* handle, Snapshot** out) {
    return on_pair(handle, [&](auto& pair, auto&) {
        require(out != nullptr, "backup_state: out is NULL");
        auto snapshot = std::make_unique<Snapshot>();
        snapshot->snapshot = pair.backup_state();
        *out = snapshot.release();
    });
}
template <class Handle, class Snapshot>
kvpool_status restore_pair_state(Handle* handle, void* stream, const Snapshot* snapshot) {
    return on_pair(handle, [&](auto& pair, auto& ref) {
        pair.restore_state(ref.space(stream), deref(snapshot, "snapshot").snapshot);
    });
}
template <class Handle, class Snapshot>
kvpool_status commit_pair_state(Handle* handle, const Snapshot* snapshot) {
    return on_pair(handle, [&](auto& pair, auto&) {
        pair.commit_state(deref(snapshot, "snapshot").snapshot);
    });
}

// The eviction callback (kvpool/eviction.hpp) over evict(user, ...); empty for
// NULL. A negative return is a failed callback: the allocation stops there
// (KVPOOL_ERROR_CALLBACK).
inline EvictionCallback eviction_callback_of(kvpool_evict_fn evict, void* user) {
    if (evict == nullptr)
        return nullptr;
    return [evict, user](const EvictionShortfall& s) -> std::size_t {
        const kvpool_eviction_shortfall shortfall{
            s.side.c_str(), s.pages, static_cast<std::int64_t>(s.bytes), s.requested_pages};
        std::int64_t freed = 0;
        {
            const NestedCalls nested;
            freed = evict(user, &shortfall);
        }
        if (freed < 0) {
            note_callback_failure("the eviction callback failed (the allocation was short of " +
                                  std::to_string(s.pages) + " pages of '" + s.side + "')");
            return 0;
        }
        return static_cast<std::size_t>(freed);
    };
}

// The composite's eviction callback; NULL removes it.
template <class Handle>
kvpool_status set_pair_eviction_callback(Handle* handle, kvpool_evict_fn evict, void* user) {
    return on_pair(handle, [&](auto& pair, auto&) {
        pair.set_eviction_callback(eviction_callback_of(evict, user));
    });
}

} // namespace kvpool::capi

struct kvpool_unified_swa_allocator : kvpool::capi::PairHandle<kvpool::UnifiedSWAAllocator> {};
struct kvpool_unified_mamba_allocator : kvpool::capi::PairHandle<kvpool::UnifiedMambaAllocator> {};
struct kvpool_unified_mamba_swa_allocator
    : kvpool::capi::PairHandle<kvpool::UnifiedMambaSWAAllocator> {};
