// C API: the tri-pool (UnifiedMambaSWAAllocator): state slots, floating
// sliding-window KV and full KV in one buffer. Translate, state-slot frees and
// each band's own view go through the side handles; the tri-pool's calls are
// those that span its sides.
#include "pairs.hpp"
#include "side_calls.hpp"

using namespace kvpool::capi;

extern "C" {

kvpool_status kvpool_unified_mamba_swa_allocator_create(
    kvpool_unified_kv_pool* pool, const char* full_name, const char* swa_name,
    const char* state_name, const kvpool_allocator_options* full_options,
    const kvpool_allocator_options* swa_options, const kvpool_allocator_options* state_options,
    kvpool_unified_mamba_swa_allocator** out) {
    return guarded([&] {
        create_pair(pool, {full_name, swa_name, state_name},
                    {full_options, swa_options, state_options}, out);
    });
}

void kvpool_unified_mamba_swa_allocator_destroy(kvpool_unified_mamba_swa_allocator* tri) {
    delete tri;
}

kvpool_status kvpool_unified_mamba_swa_allocator_side(kvpool_unified_mamba_swa_allocator* tri,
                                                      int which,
                                                      kvpool_multi_ended_allocator** out) {
    return on_pair(tri, [&](auto& t, auto& ref) {
        deref(out, "out") = pair_side(ref, which, {&t.full(), &t.swa(), &t.state()});
    });
}

kvpool_status
kvpool_unified_mamba_swa_allocator_sizes(const kvpool_unified_mamba_swa_allocator* tri,
                                         kvpool_mamba_swa_sizes* out) {
    return on_pair(tri, [&](const auto& t, auto&) {
        kvpool_mamba_swa_sizes& s = deref(out, "out");
        s.available_size = t.available_size();
        s.state_slots_available = t.state_slots_available();
        s.state_slot_full_token_cost = t.state_slot_full_token_cost();
    });
}

kvpool_status kvpool_unified_mamba_swa_allocator_alloc(kvpool_unified_mamba_swa_allocator* tri,
                                                       void* stream, int64_t need_size,
                                                       int64_t* out, int* allocated) {
    return on_pair(tri, [&](auto& t, auto& ref) {
        run_alloc(AllocCall(need_size, out), t, ref.space(stream), allocated);
    });
}

kvpool_status kvpool_unified_mamba_swa_allocator_alloc_extend(
    kvpool_unified_mamba_swa_allocator* tri, void* stream, const int64_t* prefix_lens_host,
    const int64_t* seq_lens_host, int64_t batch, const int64_t* last_loc, int64_t* out,
    int64_t out_length, int* allocated) {
    return on_pair(tri, [&](auto& t, auto& ref) {
        run_alloc(ExtendCall(prefix_lens_host, seq_lens_host, batch, last_loc, out, out_length), t,
                  ref.space(stream), allocated);
    });
}

kvpool_status kvpool_unified_mamba_swa_allocator_alloc_decode(
    kvpool_unified_mamba_swa_allocator* tri, void* stream, const int64_t* seq_lens_host,
    int64_t batch, const int64_t* last_loc, int64_t* out, int* allocated) {
    return on_pair(tri, [&](auto& t, auto& ref) {
        run_alloc(DecodeCall(seq_lens_host, batch, last_loc, out), t, ref.space(stream), allocated);
    });
}

kvpool_status
kvpool_unified_mamba_swa_allocator_set_eviction_callback(kvpool_unified_mamba_swa_allocator* tri,
                                                         kvpool_evict_fn evict, void* user) {
    return set_pair_eviction_callback(tri, evict, user);
}

kvpool_status kvpool_unified_mamba_swa_allocator_free(kvpool_unified_mamba_swa_allocator* tri,
                                                      void* stream,
                                                      const int64_t* virtual_tokens_host,
                                                      int64_t count) {
    return on_pair(tri, [&](auto& t, auto& ref) {
        t.free(ref.space(stream), host_ids(virtual_tokens_host, count));
    });
}

kvpool_status kvpool_unified_mamba_swa_allocator_free_swa(kvpool_unified_mamba_swa_allocator* tri,
                                                          void* stream,
                                                          const int64_t* virtual_tokens_host,
                                                          int64_t count) {
    return on_pair(tri, [&](auto& t, auto& ref) {
        t.free_swa(ref.space(stream), host_ids(virtual_tokens_host, count));
    });
}

kvpool_status
kvpool_unified_mamba_swa_allocator_free_group_begin(kvpool_unified_mamba_swa_allocator* tri) {
    return on_pair(tri, [&](auto& t, auto&) { t.free_group_begin(); });
}

kvpool_status
kvpool_unified_mamba_swa_allocator_free_group_end(kvpool_unified_mamba_swa_allocator* tri,
                                                  void* stream) {
    return on_pair(tri, [&](auto& t, auto& ref) { t.free_group_end(ref.space(stream)); });
}

kvpool_status
kvpool_unified_mamba_swa_allocator_alloc_state_slots(kvpool_unified_mamba_swa_allocator* tri,
                                                     void* stream, int64_t count, int64_t* out,
                                                     int* allocated) {
    return on_pair(tri, [&](auto& t, auto& ref) {
        run_alloc(StateSlotsCall(count, out), t, ref.space(stream), allocated);
    });
}

kvpool_status kvpool_unified_mamba_swa_allocator_gate_transfer(
    kvpool_unified_mamba_swa_allocator* tri, const kvpool_completion_token* token,
    const int64_t* virtual_tokens_host, int64_t count, const int64_t* state_slots_host,
    int64_t slot_count) {
    return on_pair(tri, [&](auto& t, auto&) {
        t.gate_transfer(token ? token->token : nullptr, host_ids(virtual_tokens_host, count),
                        host_ids(state_slots_host, slot_count));
    });
}

kvpool_status
kvpool_unified_mamba_swa_allocator_flush_opportunistic(kvpool_unified_mamba_swa_allocator* tri,
                                                       void* stream, int64_t* moved) {
    return on_pair(tri, [&](auto& t, auto& ref) {
        const kvpool::index_t n = t.flush_opportunistic(ref.space(stream));
        if (moved != nullptr)
            *moved = n;
    });
}

kvpool_status
kvpool_unified_mamba_swa_allocator_set_latest_forward_done(kvpool_unified_mamba_swa_allocator* tri,
                                                           const kvpool_completion_token* token) {
    return on_pair(
        tri, [&](auto& t, auto&) { t.set_latest_forward_done(token ? token->token : nullptr); });
}

kvpool_status kvpool_unified_mamba_swa_allocator_set_inflight_forward(
    kvpool_unified_mamba_swa_allocator* tri, const kvpool_completion_token* token,
    const int64_t* virtual_tokens_host, int64_t count) {
    return on_pair(tri, [&](auto& t, auto&) {
        t.set_inflight_forward(token ? token->token : nullptr,
                               host_ids(virtual_tokens_host, count));
    });
}

kvpool_status
kvpool_unified_mamba_swa_allocator_drain_pending_reuse(kvpool_unified_mamba_swa_allocator* tri) {
    return on_pair(tri, [&](auto& t, auto&) { t.drain_pending_reuse(); });
}

kvpool_status
kvpool_unified_mamba_swa_allocator_backup_state(kvpool_unified_mamba_swa_allocator* tri,
                                                kvpool_mamba_swa_snapshot** out) {
    return backup_pair_state(tri, out);
}

kvpool_status
kvpool_unified_mamba_swa_allocator_restore_state(kvpool_unified_mamba_swa_allocator* tri,
                                                 void* stream,
                                                 const kvpool_mamba_swa_snapshot* snapshot) {
    return restore_pair_state(tri, stream, snapshot);
}

kvpool_status
kvpool_unified_mamba_swa_allocator_commit_state(kvpool_unified_mamba_swa_allocator* tri,
                                                const kvpool_mamba_swa_snapshot* snapshot) {
    return commit_pair_state(tri, snapshot);
}

void kvpool_mamba_swa_snapshot_destroy(kvpool_mamba_swa_snapshot* snapshot) {
    delete snapshot;
}

kvpool_status kvpool_unified_mamba_swa_allocator_clear(kvpool_unified_mamba_swa_allocator* tri,
                                                       void* stream) {
    return on_pair(tri, [&](auto& t, auto& ref) { t.clear(ref.space(stream)); });
}

kvpool_status
kvpool_unified_mamba_swa_allocator_check_invariants(const kvpool_unified_mamba_swa_allocator* tri,
                                                    void* stream) {
    return on_pair(tri, [&](auto& t, auto& ref) { t.check_invariants(ref.space(stream)); });
}

} // extern "C"
