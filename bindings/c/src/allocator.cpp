// C API: one side of a unified buffer (MultiEndedAllocator), standalone or a
// pair's, and the options, sizes and tables every side shares.
#include "handles.hpp"
#include "side_calls.hpp"

using namespace kvpool::capi;
using kvpool::index_t;

namespace {

// A side made by kvpool_multi_ended_allocator_create.
template <class S> struct StandaloneSide final : SideOwner {
    StandaloneSide(const S& space, std::shared_ptr<PoolOn<S>> p, const std::string& name,
                   const kvpool::AllocatorOptions& options)
        : pool(std::move(p)), side(space, *pool, name, options) {}
    std::shared_ptr<PoolOn<S>> pool;
    kvpool::MultiEndedAllocator<S> side;
};

// Two sides bound as peers hold raw pointers to each other: each handle keeps both alive.
struct PeerGroup final : SideOwner {
    std::shared_ptr<SideOwner> first;
    std::shared_ptr<SideOwner> second;
};

// Runs f(side, ref) on the allocator's side, typed for its space.
template <class Handle, class F> kvpool_status on_side(Handle* a, F&& f) {
    return on(a, "allocator", [&](auto& ref) { f(*ref.side, ref); });
}

} // namespace

namespace kvpool::capi {

AllocatorOptions options_of(const kvpool_allocator_options* o) {
    AllocatorOptions options;
    if (o == nullptr)
        return options;
    options.mode = o->lazy ? CompactionMode::lazy : CompactionMode::eager;
    options.is_id_owner = o->is_id_owner != 0;
    if (o->max_moves_per_flush > 0)
        options.max_moves_per_flush = o->max_moves_per_flush;
    options.zero_on_alloc = o->zero_on_alloc != 0;
    return options;
}

} // namespace kvpool::capi

extern "C" {

kvpool_status kvpool_multi_ended_allocator_create(kvpool_unified_kv_pool* pool,
                                                  const char* side_name,
                                                  const kvpool_allocator_options* options,
                                                  void* stream,
                                                  kvpool_multi_ended_allocator** out) {
    return on(pool, "pool", [&](auto& p) {
        using S = typename std::decay_t<decltype(p)>::execution_space;
        require(side_name != nullptr, "kvpool_multi_ended_allocator_create: side_name is NULL");
        require(out != nullptr, "kvpool_multi_ended_allocator_create: out is NULL");
        auto owner = std::make_shared<StandaloneSide<S>>(p.space(stream), p.pool, side_name,
                                                         options_of(options));
        auto& side = owner->side;
        *out = new_side_handle<S>(std::move(owner), side, p.pool);
    });
}

void kvpool_multi_ended_allocator_destroy(kvpool_multi_ended_allocator* a) {
    delete a;
}

kvpool_status kvpool_multi_ended_allocator_bind_peer(kvpool_multi_ended_allocator* a,
                                                     kvpool_multi_ended_allocator* peer) {
    return guarded([&] {
        std::visit(
            [](auto& x, auto& y) {
                if constexpr (!std::is_same_v<decltype(x), decltype(y)>) {
                    throw kvpool::Error(kvpool::ErrorCode::invalid_argument,
                                        "bind_peer: the peer must be the other side of the same "
                                        "unified buffer (this one is on another device)");
                } else {
                    // The symmetric second call of a pair (b with a after a with b) finds
                    // them bound to each other: nothing to do.
                    if (x.side->is_peer_of(*y.side) && y.side->is_peer_of(*x.side))
                        return;
                    require(!x.side->has_peer() && !y.side->has_peer(),
                            "bind_peer: a side can be bound to one peer only");
                    x.side->bind_peer(*y.side);
                    auto group = std::make_shared<PeerGroup>();
                    group->first = x.owner->held;
                    group->second = y.owner->held;
                    x.owner->held = group;
                    y.owner->held = group;
                }
            },
            deref(a, "allocator").on, deref(peer, "peer").on);
    });
}

kvpool_status kvpool_multi_ended_allocator_set_move_callback(kvpool_multi_ended_allocator* a,
                                                             kvpool_move_fn move, void* user) {
    return on_side(a, [&](auto& side, auto&) {
        if (move == nullptr) {
            side.set_move_callback(nullptr);
            return;
        }
        side.set_move_callback([move, user](const auto&, const auto& src, const auto& dst) {
            const auto n = static_cast<int64_t>(src.extent(0));
            const CallerChecksMemory unchecked(false); // for the calls it makes
            if (move(user, src.data(), dst.data(), n) != 0)
                note_callback_failure("the KV move callback failed (moving " + std::to_string(n) +
                                      " pages)");
        });
    });
}

kvpool_status kvpool_multi_ended_allocator_info(const kvpool_multi_ended_allocator* a,
                                                kvpool_allocator_info* out) {
    return on_side(a, [&](const auto& side, auto&) {
        const kvpool::SubPoolGeometry& g = side.geometry();
        kvpool_allocator_info& info = deref(out, "out");
        info.entry_bytes = g.spec.entry_bytes;
        info.page_size = g.page_size();
        info.page_bytes = g.page_bytes;
        info.num_physical_pages = g.num_physical_pages;
        info.num_virtual_pages = g.num_virtual_pages;
        info.min_page_index = g.min_page_index;
        info.page_capacity = g.page_capacity();
        info.grow = grow_code(g.grow());
        info.is_id_owner = side.options().is_id_owner ? 1 : 0;
        info.lazy = side.options().mode == kvpool::CompactionMode::lazy ? 1 : 0;
        info.max_moves_per_flush = side.options().max_moves_per_flush;
        info.zero_on_alloc = side.options().zero_on_alloc ? 1 : 0;
    });
}

kvpool_status kvpool_multi_ended_allocator_state(const kvpool_multi_ended_allocator* a,
                                                 kvpool_allocator_state* out) {
    return on_side(a, [&](const auto& side, auto&) {
        const kvpool::AllocatorOccupancy occupancy = side.occupancy();
        kvpool_allocator_state& state = deref(out, "out");
        state.available_size = side.available_size();
        state.schedulable_available_size = side.schedulable_available_size();
        state.allocated_count = side.allocated_count();
        state.watermark = occupancy.watermark;
        state.live_pages = occupancy.live_pages;
        state.hole_pages = occupancy.hole_pages;
        state.pending_reuse_pages = occupancy.pending_reuse_pages;
        state.free_virtual_pages = side.options().is_id_owner ? occupancy.free_virtual_pages : 0;
        state.gap_bytes = occupancy.gap_bytes;
        const kvpool::GrowDirection grow = side.geometry().grow();
        state.gap_below_bytes =
            grow == kvpool::GrowDirection::up ? 0 : side.core().gap_below_bytes();
        state.gap_above_bytes =
            grow == kvpool::GrowDirection::down ? 0 : side.core().gap_above_bytes();
    });
}

kvpool_status kvpool_multi_ended_allocator_counters(const kvpool_multi_ended_allocator* a,
                                                    kvpool_allocator_counters* out) {
    return on_side(a, [&](auto& side, auto&) {
        const kvpool::AllocatorCounters& c = side.counters();
        kvpool_allocator_counters& r = deref(out, "out");
        r.allocs = c.allocs;
        r.failed_allocs = c.failed_allocs;
        r.frees = c.frees;
        r.pages_allocated = c.pages_allocated;
        r.pages_freed = c.pages_freed;
        r.pages_moved = c.pages_moved;
        r.bytes_moved = c.bytes_moved;
        r.flushes = c.flushes;
        r.pages_absorbed = c.pages_absorbed;
        r.holes_peak = c.holes_peak;
    });
}

kvpool_status kvpool_multi_ended_allocator_state_string(const kvpool_multi_ended_allocator* a,
                                                        const char** out) {
    return on_side(
        a, [&](auto& side, auto&) { deref(out, "out") = thread_string(side.state_string()); });
}

kvpool_status kvpool_multi_ended_allocator_tables(const kvpool_multi_ended_allocator* a,
                                                  int64_t** v2p, int64_t* v2p_rows, int64_t** p2v,
                                                  int64_t* p2v_rows) {
    return on_side(a, [&](const auto& side, auto&) {
        deref(v2p, "v2p") = side.virtual_to_physical().data();
        deref(v2p_rows, "v2p_rows") = static_cast<int64_t>(side.virtual_to_physical().extent(0));
        deref(p2v, "p2v") = side.physical_to_virtual().data();
        deref(p2v_rows, "p2v_rows") = static_cast<int64_t>(side.physical_to_virtual().extent(0));
    });
}

kvpool_status kvpool_multi_ended_allocator_free_virtual_pages(const kvpool_multi_ended_allocator* a,
                                                              int64_t* out_host, int64_t capacity,
                                                              int64_t* count) {
    return on_side(a, [&](auto& side, auto&) {
        const auto& pages = side.free_virtual_pages();
        const auto n = static_cast<int64_t>(pages.size());
        require(capacity <= 0 || out_host != nullptr,
                "kvpool_multi_ended_allocator_free_virtual_pages: out_host is NULL");
        std::copy_n(pages.begin(), std::min(std::max<int64_t>(capacity, 0), n), out_host);
        deref(count, "count") = n;
    });
}

kvpool_status kvpool_multi_ended_allocator_is_slot_allocated(const kvpool_multi_ended_allocator* a,
                                                             int64_t virtual_token, int* out) {
    return on_side(a, [&](auto& side, auto&) {
        deref(out, "out") = side.is_slot_allocated(virtual_token) ? 1 : 0;
    });
}

kvpool_status kvpool_multi_ended_allocator_alloc(kvpool_multi_ended_allocator* a, void* stream,
                                                 int64_t need_size, int64_t* out, int* allocated) {
    return on_side(a, [&](auto& side, auto& ref) {
        run_alloc(AllocCall(need_size, out), side, ref.space(stream), allocated);
    });
}

kvpool_status kvpool_multi_ended_allocator_alloc_with_virtual(kvpool_multi_ended_allocator* a,
                                                              void* stream,
                                                              const int64_t* virtual_pages_host,
                                                              int64_t count, int* allocated) {
    return on_side(a, [&](auto& side, auto& ref) {
        int& ok = deref(allocated, "allocated");
        ok =
            side.alloc_with_virtual(ref.space(stream), host_ids(virtual_pages_host, count)) ? 1 : 0;
    });
}

kvpool_status kvpool_multi_ended_allocator_alloc_extend(kvpool_multi_ended_allocator* a,
                                                        void* stream,
                                                        const int64_t* prefix_lens_host,
                                                        const int64_t* seq_lens_host, int64_t batch,
                                                        const int64_t* last_loc, int64_t* out,
                                                        int64_t out_length, int* allocated) {
    return on_side(a, [&](auto& side, auto& ref) {
        run_alloc(ExtendCall(prefix_lens_host, seq_lens_host, batch, last_loc, out, out_length),
                  side, ref.space(stream), allocated);
    });
}

kvpool_status kvpool_multi_ended_allocator_alloc_decode(kvpool_multi_ended_allocator* a,
                                                        void* stream, const int64_t* seq_lens_host,
                                                        int64_t batch, const int64_t* last_loc,
                                                        int64_t* out, int* allocated) {
    return on_side(a, [&](auto& side, auto& ref) {
        run_alloc(DecodeCall(seq_lens_host, batch, last_loc, out), side, ref.space(stream),
                  allocated);
    });
}

kvpool_status kvpool_multi_ended_allocator_free(kvpool_multi_ended_allocator* a, void* stream,
                                                const int64_t* virtual_tokens_host, int64_t count,
                                                int skip_unbound) {
    return on_side(a, [&](auto& side, auto& ref) {
        const auto tokens = host_ids(virtual_tokens_host, count);
        if (skip_unbound)
            side.free_if_bound(ref.space(stream), tokens);
        else
            side.free(ref.space(stream), tokens);
    });
}

kvpool_status kvpool_multi_ended_allocator_free_group_begin(kvpool_multi_ended_allocator* a) {
    return on_side(a, [&](auto& side, auto&) { side.free_group_begin(); });
}

kvpool_status kvpool_multi_ended_allocator_free_group_end(kvpool_multi_ended_allocator* a,
                                                          void* stream) {
    return on_side(a, [&](auto& side, auto& ref) { side.free_group_end(ref.space(stream)); });
}

kvpool_status kvpool_multi_ended_allocator_flush(kvpool_multi_ended_allocator* a, void* stream,
                                                 int urgent, int64_t* moved) {
    return on_side(a, [&](auto& side, auto& ref) {
        const index_t n = side.flush(ref.space(stream), urgent != 0);
        if (moved != nullptr)
            *moved = n;
    });
}

kvpool_status kvpool_multi_ended_allocator_drain_pending_reuse(kvpool_multi_ended_allocator* a) {
    return on_side(a, [&](auto& side, auto&) { side.drain_pending_reuse(); });
}

kvpool_status
kvpool_multi_ended_allocator_set_latest_forward_done(kvpool_multi_ended_allocator* a,
                                                     const kvpool_completion_token* token) {
    return on_side(a, [&](auto& side, auto&) {
        side.set_latest_forward_done(token ? token->token : nullptr);
    });
}

kvpool_status kvpool_multi_ended_allocator_set_inflight_forward(
    kvpool_multi_ended_allocator* a, const kvpool_completion_token* token,
    const int64_t* virtual_tokens_host, int64_t count) {
    return on_side(a, [&](auto& side, auto&) {
        side.set_inflight_forward(token ? token->token : nullptr,
                                  host_ids(virtual_tokens_host, count));
    });
}

kvpool_status kvpool_multi_ended_allocator_gate_transfer(kvpool_multi_ended_allocator* a,
                                                         const kvpool_completion_token* token,
                                                         const int64_t* virtual_tokens_host,
                                                         int64_t count) {
    return on_side(a, [&](auto& side, auto&) {
        side.gate_transfer(token ? token->token : nullptr, host_ids(virtual_tokens_host, count));
    });
}

kvpool_status kvpool_multi_ended_allocator_translate(const kvpool_multi_ended_allocator* a,
                                                     void* stream, const int64_t* virtual_tokens,
                                                     int64_t n, void* out, int out_int32) {
    return on_side(a, [&](const auto& side, auto& ref) {
        translate_into(side, ref.space(stream), virtual_tokens, n, out, out_int32 != 0);
    });
}

kvpool_status kvpool_multi_ended_allocator_translate_dense(const kvpool_multi_ended_allocator* a,
                                                           void* stream,
                                                           const int64_t* virtual_tokens, int64_t n,
                                                           int64_t* out,
                                                           int64_t kernel_page_multiplier) {
    return on_side(a, [&](const auto& side, auto& ref) {
        using S = typename std::decay_t<decltype(ref)>::execution_space;
        require(n >= 0, "translate_dense: negative length");
        require_reachable<S>(virtual_tokens, n);
        require_reachable<S>(out, n);
        side.translate_dense(ref.space(stream),
                             typename kvpool::MultiEndedAllocator<S>::const_index_view(
                                 virtual_tokens, static_cast<std::size_t>(n)),
                             IdsOn<S>(out, static_cast<std::size_t>(n)), kernel_page_multiplier);
    });
}

kvpool_status kvpool_multi_ended_allocator_backup_state(kvpool_multi_ended_allocator* a,
                                                        kvpool_allocator_snapshot** out) {
    return on_side(a, [&](auto& side, auto&) {
        require(out != nullptr, "kvpool_multi_ended_allocator_backup_state: out is NULL");
        auto snapshot = std::make_unique<kvpool_allocator_snapshot>();
        snapshot->snapshot = side.backup_state();
        *out = snapshot.release();
    });
}

kvpool_status
kvpool_multi_ended_allocator_restore_state(kvpool_multi_ended_allocator* a, void* stream,
                                           const kvpool_allocator_snapshot* snapshot) {
    return on_side(a, [&](auto& side, auto& ref) {
        side.restore_state(ref.space(stream), deref(snapshot, "snapshot").snapshot);
    });
}

kvpool_status kvpool_multi_ended_allocator_commit_state(kvpool_multi_ended_allocator* a,
                                                        const kvpool_allocator_snapshot* snapshot) {
    return on_side(
        a, [&](auto& side, auto&) { side.commit_state(deref(snapshot, "snapshot").snapshot); });
}

void kvpool_allocator_snapshot_destroy(kvpool_allocator_snapshot* snapshot) {
    delete snapshot;
}

kvpool_status kvpool_multi_ended_allocator_clear(kvpool_multi_ended_allocator* a, void* stream) {
    return on_side(a, [&](auto& side, auto& ref) { side.clear(ref.space(stream)); });
}

kvpool_status kvpool_multi_ended_allocator_check_invariants(const kvpool_multi_ended_allocator* a,
                                                            void* stream) {
    return on_side(a, [&](auto& side, auto& ref) { side.check_invariants(ref.space(stream)); });
}

} // extern "C"
