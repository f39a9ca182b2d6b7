// C API: the Mamba pair (UnifiedMambaAllocator). Its per-side calls go through
// the side handles; the pair adds the state slot's cost and starvation, and
// allocations that ask its eviction callback when short.
#include "pairs.hpp"
#include "side_calls.hpp"

using namespace kvpool::capi;

extern "C" {

kvpool_status kvpool_unified_mamba_allocator_create(kvpool_unified_kv_pool* pool,
                                                    const char* full_name, const char* state_name,
                                                    const kvpool_allocator_options* full_options,
                                                    const kvpool_allocator_options* state_options,
                                                    kvpool_unified_mamba_allocator** out) {
    return guarded([&] {
        create_pair(pool, {full_name, state_name}, {full_options, state_options}, out);
    });
}

void kvpool_unified_mamba_allocator_destroy(kvpool_unified_mamba_allocator* pair) {
    delete pair;
}

kvpool_status kvpool_unified_mamba_allocator_side(kvpool_unified_mamba_allocator* pair, int which,
                                                  kvpool_multi_ended_allocator** out) {
    return on_pair(pair, [&](auto& p, auto& ref) {
        deref(out, "out") = pair_side(ref, which, {&p.full(), &p.state()});
    });
}

kvpool_status kvpool_unified_mamba_allocator_sizes(const kvpool_unified_mamba_allocator* pair,
                                                   kvpool_mamba_sizes* out) {
    return on_pair(pair, [&](const auto& p, auto&) {
        kvpool_mamba_sizes& s = deref(out, "out");
        s.available_size = p.available_size();
        s.state_slots_available = p.state_slots_available();
        s.state_slot_full_token_cost = p.state_slot_full_token_cost();
        s.state_slot_starved = p.state_slot_starved() ? 1 : 0;
    });
}

kvpool_status kvpool_unified_mamba_allocator_alloc(kvpool_unified_mamba_allocator* pair,
                                                   void* stream, int64_t need_size, int64_t* out,
                                                   int* allocated) {
    return on_pair(pair, [&](auto& p, auto& ref) {
        run_alloc(AllocCall(need_size, out), p, ref.space(stream), allocated);
    });
}

kvpool_status kvpool_unified_mamba_allocator_alloc_extend(
    kvpool_unified_mamba_allocator* pair, void* stream, const int64_t* prefix_lens_host,
    const int64_t* seq_lens_host, int64_t batch, const int64_t* last_loc, int64_t* out,
    int64_t out_length, int* allocated) {
    return on_pair(pair, [&](auto& p, auto& ref) {
        run_alloc(ExtendCall(prefix_lens_host, seq_lens_host, batch, last_loc, out, out_length), p,
                  ref.space(stream), allocated);
    });
}

kvpool_status kvpool_unified_mamba_allocator_alloc_decode(kvpool_unified_mamba_allocator* pair,
                                                          void* stream,
                                                          const int64_t* seq_lens_host,
                                                          int64_t batch, const int64_t* last_loc,
                                                          int64_t* out, int* allocated) {
    return on_pair(pair, [&](auto& p, auto& ref) {
        run_alloc(DecodeCall(seq_lens_host, batch, last_loc, out), p, ref.space(stream), allocated);
    });
}

kvpool_status kvpool_unified_mamba_allocator_alloc_state_slots(kvpool_unified_mamba_allocator* pair,
                                                               void* stream, int64_t count,
                                                               int64_t* out, int* allocated) {
    return on_pair(pair, [&](auto& p, auto& ref) {
        run_alloc(StateSlotsCall(count, out), p, ref.space(stream), allocated);
    });
}

kvpool_status
kvpool_unified_mamba_allocator_set_eviction_callback(kvpool_unified_mamba_allocator* pair,
                                                     kvpool_evict_fn evict, void* user) {
    return set_pair_eviction_callback(pair, evict, user);
}

kvpool_status kvpool_unified_mamba_allocator_gate_transfer(kvpool_unified_mamba_allocator* pair,
                                                           const kvpool_completion_token* token,
                                                           const int64_t* virtual_tokens_host,
                                                           int64_t count,
                                                           const int64_t* state_slots_host,
                                                           int64_t slot_count) {
    return on_pair(pair, [&](auto& p, auto&) {
        p.gate_transfer(token ? token->token : nullptr, host_ids(virtual_tokens_host, count),
                        host_ids(state_slots_host, slot_count));
    });
}

kvpool_status kvpool_unified_mamba_allocator_backup_state(kvpool_unified_mamba_allocator* pair,
                                                          kvpool_pair_snapshot** out) {
    return backup_pair_state(pair, out);
}

kvpool_status kvpool_unified_mamba_allocator_restore_state(kvpool_unified_mamba_allocator* pair,
                                                           void* stream,
                                                           const kvpool_pair_snapshot* snapshot) {
    return restore_pair_state(pair, stream, snapshot);
}

kvpool_status kvpool_unified_mamba_allocator_commit_state(kvpool_unified_mamba_allocator* pair,
                                                          const kvpool_pair_snapshot* snapshot) {
    return commit_pair_state(pair, snapshot);
}

} // extern "C"
