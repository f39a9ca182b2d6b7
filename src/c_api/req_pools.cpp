// C API: the request tables (ReqToTokenPool, HybridReqToTokenPool).
#include "handles.hpp"

using namespace kvpool::capi;
using kvpool::index_t;

namespace {

// Mamba state slots from a page-size-1 side: the slot ids are its virtual pages.
class SideStateSlots final : public kvpool::StateSlotAllocator<Space> {
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

struct kvpool_req_pool {
    LiveHandle live;
    std::unique_ptr<ReqPool> pool;
};

struct kvpool_hybrid_req_pool {
    LiveHandle live;
    std::unique_ptr<SideStateSlots> states; // destroyed after the pool that refers to it
    std::unique_ptr<HybridPool> pool;
};

namespace {

ReqPool& req_of(kvpool_req_pool* p) {
    return *deref(p, "pool").pool;
}
const ReqPool& req_of(const kvpool_req_pool* p) {
    return *deref(p, "pool").pool;
}
HybridPool& hybrid_of(kvpool_hybrid_req_pool* p) {
    return *deref(p, "pool").pool;
}
const HybridPool& hybrid_of(const kvpool_hybrid_req_pool* p) {
    return *deref(p, "pool").pool;
}

void copy_slots(const std::vector<index_t>& slots, int64_t* out) {
    require(slots.empty() || out != nullptr, "slots_host is NULL");
    std::copy(slots.begin(), slots.end(), out);
}

} // namespace

extern "C" {

kvpool_status kvpool_req_pool_create(int64_t size, int64_t max_context_len, void* stream,
                                     kvpool_req_pool** out) {
    return guarded([&] {
        require(out != nullptr, "kvpool_req_pool_create: out is NULL");
        ensure_initialized();
        auto handle = std::make_unique<kvpool_req_pool>();
        handle->pool = std::make_unique<ReqPool>(space_of(stream), size, max_context_len);
        *out = handle.release();
    });
}

void kvpool_req_pool_destroy(kvpool_req_pool* pool) {
    delete pool;
}

kvpool_status kvpool_req_pool_table(const kvpool_req_pool* pool, int64_t** table, int64_t* rows,
                                    int64_t* columns) {
    return guarded([&] {
        const auto& t = req_of(pool).req_to_token();
        deref(table, "table") = t.data();
        deref(rows, "rows") = static_cast<int64_t>(t.extent(0));
        deref(columns, "columns") = static_cast<int64_t>(t.extent(1));
    });
}

kvpool_status kvpool_req_pool_available(const kvpool_req_pool* pool, int64_t* out) {
    return guarded([&] { deref(out, "out") = req_of(pool).available_size(); });
}

kvpool_status kvpool_req_pool_generation(const kvpool_req_pool* pool, int64_t slot, int64_t* out) {
    return guarded(
        [&] { deref(out, "out") = static_cast<int64_t>(req_of(pool).generation(slot)); });
}

kvpool_status kvpool_req_pool_alloc(kvpool_req_pool* pool, int64_t n, int64_t* slots_host,
                                    int* allocated) {
    return guarded([&] {
        auto slots = req_of(pool).alloc(n);
        if (slots)
            copy_slots(*slots, slots_host);
        deref(allocated, "allocated") = slots ? 1 : 0;
    });
}

kvpool_status kvpool_req_pool_free(kvpool_req_pool* pool, const int64_t* slots_host,
                                   int64_t count) {
    return guarded([&] { req_of(pool).free(host_ids(slots_host, count)); });
}

kvpool_status kvpool_req_pool_clear(kvpool_req_pool* pool) {
    return guarded([&] { req_of(pool).clear(); });
}

kvpool_status kvpool_req_pool_write(kvpool_req_pool* pool, void* stream, int64_t slot,
                                    int64_t start, const int64_t* ids, int64_t n) {
    return guarded([&] {
        ReqPool& p = req_of(pool);
        require(n >= 0, "write: negative length");
        p.write(space_of(stream), slot, start,
                ReqPool::const_index_view(ids, static_cast<std::size_t>(n)));
    });
}

kvpool_status kvpool_req_pool_check_invariants(const kvpool_req_pool* pool, void* stream) {
    return guarded([&] { req_of(pool).check_invariants(space_of(stream)); });
}

kvpool_status kvpool_hybrid_req_pool_create(int64_t size, int64_t max_context_len,
                                            kvpool_allocator* states,
                                            const kvpool_hybrid_options* options, void* stream,
                                            kvpool_hybrid_req_pool** out) {
    return guarded([&] {
        auto& side = deref(states, "states");
        require(out != nullptr, "kvpool_hybrid_req_pool_create: out is NULL");
        kvpool::HybridReqToTokenPoolOptions o;
        if (options != nullptr) {
            o.enable_mamba_extra_buffer = options->enable_mamba_extra_buffer != 0;
            o.enable_mamba_extra_buffer_lazy = options->enable_mamba_extra_buffer_lazy != 0;
            o.mamba_ping_pong_track_buffer_size = options->mamba_ping_pong_track_buffer_size;
        }
        auto handle = std::make_unique<kvpool_hybrid_req_pool>();
        handle->states = std::make_unique<SideStateSlots>(side.owner, *side.side);
        handle->pool = std::make_unique<HybridPool>(space_of(stream), size, max_context_len,
                                                    *handle->states, o);
        *out = handle.release();
    });
}

void kvpool_hybrid_req_pool_destroy(kvpool_hybrid_req_pool* pool) {
    delete pool;
}

kvpool_status kvpool_hybrid_req_pool_tables(const kvpool_hybrid_req_pool* pool, int64_t** table,
                                            int64_t* rows, int64_t* columns, int64_t** mamba_map,
                                            int64_t** track_map, int64_t* track_columns) {
    return guarded([&] {
        const HybridPool& p = hybrid_of(pool);
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

kvpool_status kvpool_hybrid_req_pool_available(const kvpool_hybrid_req_pool* pool, int64_t* out) {
    return guarded([&] { deref(out, "out") = hybrid_of(pool).available_size(); });
}

kvpool_status kvpool_hybrid_req_pool_generation(const kvpool_hybrid_req_pool* pool, int64_t slot,
                                                int64_t* out) {
    return guarded(
        [&] { deref(out, "out") = static_cast<int64_t>(hybrid_of(pool).generation(slot)); });
}

kvpool_status kvpool_hybrid_req_pool_alloc(kvpool_hybrid_req_pool* pool, void* stream,
                                           const int64_t* mamba_slots_host, int64_t n,
                                           int64_t* slots_host, int* allocated) {
    return guarded([&] {
        HybridPool& p = hybrid_of(pool);
        auto slots = p.alloc_adopting_mamba(space_of(stream), host_ids(mamba_slots_host, n));
        if (slots)
            copy_slots(*slots, slots_host);
        deref(allocated, "allocated") = slots ? 1 : 0;
    });
}

kvpool_status kvpool_hybrid_req_pool_free(kvpool_hybrid_req_pool* pool, const int64_t* slots_host,
                                          int64_t count) {
    return guarded([&] { hybrid_of(pool).free(host_ids(slots_host, count)); });
}

kvpool_status kvpool_hybrid_req_pool_free_mamba_cache(kvpool_hybrid_req_pool* pool, void* stream,
                                                      int64_t req, int64_t keep_idx,
                                                      int64_t* kept) {
    return guarded([&] {
        HybridPool& p = hybrid_of(pool);
        const index_t k = keep_idx >= 0 ? p.free_mamba_cache(space_of(stream), req, keep_idx)
                                        : p.free_mamba_cache(space_of(stream), req);
        if (kept != nullptr)
            *kept = k;
    });
}

kvpool_status kvpool_hybrid_req_pool_request(const kvpool_hybrid_req_pool* pool, int64_t req,
                                             int64_t* mamba_slot, int64_t* tracks_host,
                                             int64_t* next_track_idx) {
    return guarded([&] {
        const HybridPool& p = hybrid_of(pool);
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

kvpool_status kvpool_hybrid_req_pool_set_next_track_idx(kvpool_hybrid_req_pool* pool, int64_t req,
                                                        int64_t idx) {
    return guarded([&] { hybrid_of(pool).set_mamba_next_track_idx(req, idx); });
}

kvpool_status kvpool_hybrid_req_pool_set_track_slot(kvpool_hybrid_req_pool* pool, void* stream,
                                                    int64_t req, int64_t idx, int64_t value,
                                                    int64_t* previous) {
    return guarded([&] {
        HybridPool& p = hybrid_of(pool);
        const index_t old = p.set_mamba_ping_pong_slot(space_of(stream), req, idx, value);
        if (previous != nullptr)
            *previous = old;
    });
}

kvpool_status kvpool_hybrid_req_pool_donate_track_slot(kvpool_hybrid_req_pool* pool, void* stream,
                                                       int64_t req, int64_t new_slot,
                                                       int64_t* donated) {
    return guarded([&] {
        HybridPool& p = hybrid_of(pool);
        deref(donated, "donated") = p.donate_mamba_ping_pong_slot(space_of(stream), req, new_slot);
    });
}

kvpool_status kvpool_hybrid_req_pool_alloc_track_slot(kvpool_hybrid_req_pool* pool, void* stream,
                                                      int64_t req, int64_t idx, int* allocated) {
    return guarded([&] {
        HybridPool& p = hybrid_of(pool);
        deref(allocated, "allocated") =
            p.alloc_mamba_ping_pong_slot(space_of(stream), req, idx) ? 1 : 0;
    });
}

kvpool_status kvpool_hybrid_req_pool_clear(kvpool_hybrid_req_pool* pool, void* stream) {
    return guarded([&] { hybrid_of(pool).clear(space_of(stream)); });
}

kvpool_status kvpool_hybrid_req_pool_check_invariants(const kvpool_hybrid_req_pool* pool,
                                                      void* stream) {
    return guarded([&] { hybrid_of(pool).check_invariants(space_of(stream)); });
}

} // extern "C"
