// C API: the request tables (ReqToTokenPool, HybridReqToTokenPool).
#include "handles.hpp"

using namespace kvpool::capi;
using kvpool::index_t;

namespace {

// Mamba state slots from a page-size-1 side: the slot ids are its virtual pages.
template <class Space> class SideStateSlots final : public kvpool::StateSlotAllocator<Space> {
    using Side = kvpool::MultiEndedAllocator<Space>;
    using Ids = IdsOn<Space>;

public:
    SideStateSlots(std::shared_ptr<SideOwner> owner, Side& side)
        : owner_(std::move(owner)), side_(side) {
        require(side.page_size() == 1,
                "a hybrid request table needs state slots of page size 1, not " +
                    std::to_string(side.page_size()));
    }
    std::optional<std::vector<index_t>> alloc(const Space& space, index_t n) override {
        if (side_.backup_window_open())
            throw kvpool::Error(kvpool::ErrorCode::invalid_state,
                                "a request table cannot take state slots inside a backup window "
                                "(a restore would take them back from under it). " +
                                    side_.state_string());
        if (static_cast<index_t>(scratch_.extent(0)) < n)
            scratch_ =
                kvpool::kk::uninitialized<Ids>("kvpool::state_slots", static_cast<std::size_t>(n));
        const auto out =
            Kokkos::subview(scratch_, std::make_pair(std::size_t(0), static_cast<std::size_t>(n)));
        if (!side_.alloc(space, n, out))
            return std::nullopt;
        return side_.last_allocated_virtual_pages();
    }
    void free(const Space& space, const std::vector<index_t>& slots) override {
        side_.free(space, slots);
    }
    void clear(const Space& space) override { side_.clear(space); }
    void atomically(const Space& space, const std::function<void()>& body) override {
        side_.transaction(space, body);
    }

private:
    std::shared_ptr<SideOwner> owner_;
    Side& side_;
    Ids scratch_; // where the side writes the slot ids; only the host's copy is used
};

} // namespace

namespace {

template <class S> struct ReqRef : OnSpace<S> {
    std::unique_ptr<kvpool::ReqToTokenPool<S>> pool;
};

template <class S> struct HybridRef : OnSpace<S> {
    std::unique_ptr<SideStateSlots<S>> states; // destroyed after the pool that refers to it
    std::unique_ptr<kvpool::HybridReqToTokenPool<S>> pool;
};

} // namespace

struct kvpool_req_to_token_pool {
    LiveHandle live;
    OnEachSpace<ReqRef> on;
};

struct kvpool_hybrid_req_to_token_pool {
    LiveHandle live;
    OnEachSpace<HybridRef> on;
};

namespace {

// Runs f(table, ref) on the request table, typed for its space, inside guarded().
template <class Handle, class F> kvpool_status on_table(Handle* handle, F&& f) {
    return on(handle, "pool", [&](auto& ref) { f(*ref.pool, ref); });
}

void copy_slots(const std::vector<index_t>& slots, int64_t* out) {
    require(slots.empty() || out != nullptr, "slots_host is NULL");
    std::copy(slots.begin(), slots.end(), out);
}

} // namespace

extern "C" {

kvpool_status kvpool_req_to_token_pool_create_on(int device, int64_t size, int64_t max_context_len,
                                                 void* stream, kvpool_req_to_token_pool** out) {
    return guarded([&] {
        require(out != nullptr, "kvpool_req_to_token_pool_create: out is NULL");
        on_device(device, "kvpool_req_to_token_pool_create", [&](auto on) {
            using S = typename decltype(on)::execution_space;
            ensure_initialized();
            auto handle = std::make_unique<kvpool_req_to_token_pool>();
            ReqRef<S> ref;
            ref.pool = std::make_unique<kvpool::ReqToTokenPool<S>>(on.space(stream), size,
                                                                   max_context_len);
            handle->on = std::move(ref);
            *out = handle.release();
        });
    });
}

kvpool_status kvpool_req_to_token_pool_create(int64_t size, int64_t max_context_len, void* stream,
                                              kvpool_req_to_token_pool** out) {
    return kvpool_req_to_token_pool_create_on(default_device, size, max_context_len, stream, out);
}

void kvpool_req_to_token_pool_destroy(kvpool_req_to_token_pool* pool) {
    delete pool;
}

kvpool_status kvpool_req_to_token_pool_table(const kvpool_req_to_token_pool* pool, int64_t** table,
                                             int64_t* rows, int64_t* columns) {
    return on_table(pool, [&](const auto& p, auto&) {
        const auto& t = p.req_to_token();
        deref(table, "table") = t.data();
        deref(rows, "rows") = static_cast<int64_t>(t.extent(0));
        deref(columns, "columns") = static_cast<int64_t>(t.extent(1));
    });
}

kvpool_status kvpool_req_to_token_pool_available(const kvpool_req_to_token_pool* pool,
                                                 int64_t* out) {
    return on_table(pool, [&](const auto& p, auto&) { deref(out, "out") = p.available_size(); });
}

kvpool_status kvpool_req_to_token_pool_generation(const kvpool_req_to_token_pool* pool,
                                                  int64_t slot, int64_t* out) {
    return on_table(pool, [&](const auto& p, auto&) {
        deref(out, "out") = static_cast<int64_t>(p.generation(slot));
    });
}

kvpool_status kvpool_req_to_token_pool_alloc(kvpool_req_to_token_pool* pool, int64_t n,
                                             int64_t* slots_host, int* allocated) {
    return on_table(pool, [&](auto& p, auto&) {
        auto slots = p.alloc(n);
        if (slots)
            copy_slots(*slots, slots_host);
        deref(allocated, "allocated") = slots ? 1 : 0;
    });
}

kvpool_status kvpool_req_to_token_pool_free(kvpool_req_to_token_pool* pool,
                                            const int64_t* slots_host, int64_t count) {
    return on_table(pool, [&](auto& p, auto&) { p.free(host_ids(slots_host, count)); });
}

kvpool_status kvpool_req_to_token_pool_clear(kvpool_req_to_token_pool* pool) {
    return on_table(pool, [&](auto& p, auto&) { p.clear(); });
}

kvpool_status kvpool_req_to_token_pool_write(kvpool_req_to_token_pool* pool, void* stream,
                                             int64_t slot, int64_t start, const int64_t* ids,
                                             int64_t n) {
    return on_table(pool, [&](auto& p, auto& ref) {
        require(n >= 0, "write: negative length");
        using Table = std::decay_t<decltype(p)>;
        require_reachable<typename std::decay_t<decltype(ref)>::execution_space>(ids, n);
        p.write(ref.space(stream), slot, start,
                typename Table::const_index_view(ids, static_cast<std::size_t>(n)));
    });
}

kvpool_status kvpool_req_to_token_pool_check_invariants(const kvpool_req_to_token_pool* pool,
                                                        void* stream) {
    return on_table(pool, [&](const auto& p, auto& ref) { p.check_invariants(ref.space(stream)); });
}

kvpool_status
kvpool_hybrid_req_to_token_pool_create(int64_t size, int64_t max_context_len,
                                       kvpool_multi_ended_allocator* states,
                                       const kvpool_hybrid_req_to_token_pool_options* options,
                                       void* stream, kvpool_hybrid_req_to_token_pool** out) {
    return on(states, "states", [&](auto& side) {
        using S = typename std::decay_t<decltype(side)>::execution_space;
        require(out != nullptr, "kvpool_hybrid_req_to_token_pool_create: out is NULL");
        kvpool::HybridReqToTokenPoolOptions o;
        if (options != nullptr) {
            o.enable_mamba_extra_buffer = options->enable_mamba_extra_buffer != 0;
            o.enable_mamba_extra_buffer_lazy = options->enable_mamba_extra_buffer_lazy != 0;
            o.mamba_ping_pong_track_buffer_size = options->mamba_ping_pong_track_buffer_size;
        }
        auto handle = std::make_unique<kvpool_hybrid_req_to_token_pool>();
        HybridRef<S> ref;
        ref.states = std::make_unique<SideStateSlots<S>>(side.owner, *side.side);
        ref.pool = std::make_unique<kvpool::HybridReqToTokenPool<S>>(
            side.space(stream), size, max_context_len, *ref.states, o);
        handle->on = std::move(ref);
        *out = handle.release();
    });
}

void kvpool_hybrid_req_to_token_pool_destroy(kvpool_hybrid_req_to_token_pool* pool) {
    delete pool;
}

kvpool_status kvpool_hybrid_req_to_token_pool_tables(const kvpool_hybrid_req_to_token_pool* pool,
                                                     int64_t** table, int64_t* rows,
                                                     int64_t* columns, int64_t** mamba_map,
                                                     int64_t** track_map, int64_t* track_columns) {
    return on_table(pool, [&](const auto& p, auto&) {
        const auto& t = p.req_to_token();
        deref(table, "table") = t.data();
        deref(rows, "rows") = static_cast<int64_t>(t.extent(0));
        deref(columns, "columns") = static_cast<int64_t>(t.extent(1));
        deref(mamba_map, "mamba_map") = p.req_index_to_mamba_index().data();
        deref(track_map, "track_map") = p.req_index_to_mamba_ping_pong_track_buffer().data();
        deref(track_columns, "track_columns") =
            static_cast<int64_t>(p.req_index_to_mamba_ping_pong_track_buffer().extent(1));
    });
}

kvpool_status kvpool_hybrid_req_to_token_pool_available(const kvpool_hybrid_req_to_token_pool* pool,
                                                        int64_t* out) {
    return on_table(pool, [&](const auto& p, auto&) { deref(out, "out") = p.available_size(); });
}

kvpool_status
kvpool_hybrid_req_to_token_pool_generation(const kvpool_hybrid_req_to_token_pool* pool,
                                           int64_t slot, int64_t* out) {
    return on_table(pool, [&](const auto& p, auto&) {
        deref(out, "out") = static_cast<int64_t>(p.generation(slot));
    });
}

kvpool_status kvpool_hybrid_req_to_token_pool_alloc(kvpool_hybrid_req_to_token_pool* pool,
                                                    void* stream, const int64_t* mamba_slots_host,
                                                    int64_t n, int64_t* slots_host,
                                                    int* allocated) {
    return on_table(pool, [&](auto& p, auto& ref) {
        auto slots = p.alloc_adopting_mamba(ref.space(stream), host_ids(mamba_slots_host, n));
        if (slots)
            copy_slots(*slots, slots_host);
        deref(allocated, "allocated") = slots ? 1 : 0;
    });
}

kvpool_status kvpool_hybrid_req_to_token_pool_free(kvpool_hybrid_req_to_token_pool* pool,
                                                   const int64_t* slots_host, int64_t count) {
    return on_table(pool, [&](auto& p, auto&) { p.free(host_ids(slots_host, count)); });
}

kvpool_status
kvpool_hybrid_req_to_token_pool_free_mamba_cache(kvpool_hybrid_req_to_token_pool* pool,
                                                 void* stream, int64_t req, int64_t keep_idx,
                                                 int64_t* kept) {
    return on_table(pool, [&](auto& p, auto& ref) {
        const index_t k = keep_idx >= 0 ? p.free_mamba_cache(ref.space(stream), req, keep_idx)
                                        : p.free_mamba_cache(ref.space(stream), req);
        if (kept != nullptr)
            *kept = k;
    });
}

kvpool_status kvpool_hybrid_req_to_token_pool_request(const kvpool_hybrid_req_to_token_pool* pool,
                                                      int64_t req, int64_t* mamba_slot,
                                                      int64_t* tracks_host,
                                                      int64_t* next_track_idx) {
    return on_table(pool, [&](const auto& p, auto&) {
        const index_t slot = p.mamba_slot(req);
        deref(mamba_slot, "mamba_slot") = slot;
        int64_t& next = deref(next_track_idx, "next_track_idx");
        next = kvpool::unbound;
        if (!p.options().enable_mamba_extra_buffer)
            return;
        copy_slots(p.mamba_ping_pong_track_buffer(req), tracks_host);
        if (slot != kvpool::unbound)
            next = p.mamba_next_track_idx(req);
    });
}

kvpool_status
kvpool_hybrid_req_to_token_pool_set_next_track_idx(kvpool_hybrid_req_to_token_pool* pool,
                                                   int64_t req, int64_t idx) {
    return on_table(pool, [&](auto& p, auto&) { p.set_mamba_next_track_idx(req, idx); });
}

kvpool_status kvpool_hybrid_req_to_token_pool_set_track_slot(kvpool_hybrid_req_to_token_pool* pool,
                                                             void* stream, int64_t req, int64_t idx,
                                                             int64_t value, int64_t* previous) {
    return on_table(pool, [&](auto& p, auto& ref) {
        const index_t old = p.set_mamba_ping_pong_slot(ref.space(stream), req, idx, value);
        if (previous != nullptr)
            *previous = old;
    });
}

kvpool_status
kvpool_hybrid_req_to_token_pool_donate_track_slot(kvpool_hybrid_req_to_token_pool* pool,
                                                  void* stream, int64_t req, int64_t new_slot,
                                                  int64_t* donated) {
    return on_table(pool, [&](auto& p, auto& ref) {
        deref(donated, "donated") = p.donate_mamba_ping_pong_slot(ref.space(stream), req, new_slot);
    });
}

kvpool_status kvpool_hybrid_req_to_token_pool_alloc_track_slot(
    kvpool_hybrid_req_to_token_pool* pool, void* stream, int64_t req, int64_t idx, int* allocated) {
    return on_table(pool, [&](auto& p, auto& ref) {
        deref(allocated, "allocated") =
            p.alloc_mamba_ping_pong_slot(ref.space(stream), req, idx) ? 1 : 0;
    });
}

kvpool_status kvpool_hybrid_req_to_token_pool_clear(kvpool_hybrid_req_to_token_pool* pool,
                                                    void* stream) {
    return on_table(pool, [&](auto& p, auto& ref) { p.clear(ref.space(stream)); });
}

kvpool_status
kvpool_hybrid_req_to_token_pool_check_invariants(const kvpool_hybrid_req_to_token_pool* pool,
                                                 void* stream) {
    return on_table(pool, [&](const auto& p, auto& ref) { p.check_invariants(ref.space(stream)); });
}

} // extern "C"
