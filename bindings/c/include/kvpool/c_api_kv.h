/* kvpool's C API, the KV-allocator handle: part of c_api.h, which includes
 * this header (include either; the conventions are c_api.h's). */
#ifndef KVPOOL_C_API_KV_H
#define KVPOOL_C_API_KV_H

#include "c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ KV-allocator handle
 * One handle type for every allocator kvpool makes: a side (standalone or a
 * composite's), the SWA pair, the Mamba pair and the tri-pool. Each composite
 * gives one (kvpool_*_kv below); every op the composites share is then one
 * entry point, kvpool_kv_*, that does what the composite's own call does. A
 * new op is one declaration here, whatever the number of composites (README,
 * "Adding an op").
 *
 * A KV handle keeps its allocator alive (as a side handle keeps its pair) and
 * is destroyed with kvpool_kv_destroy. An op the allocator has no part for
 * (free_swa without a sliding-window side, state slots without a state side,
 * an eviction callback on a side) is KVPOOL_ERROR_INVALID_ARGUMENT, naming
 * the allocator, and changes nothing.
 *
 * The composites' own entry points (kvpool_unified_swa_allocator_alloc, ...) stay and do
 * the same; new code can use these instead: each entry point below names the
 * calls it stands for. */
typedef struct kvpool_kv_allocator kvpool_kv_allocator;
typedef struct kvpool_kv_snapshot kvpool_kv_snapshot;

/* What a KV handle stands for (kvpool_kv_kind). */
enum {
    KVPOOL_KV_MULTI_ENDED_ALLOCATOR = 0,   /* a side: kvpool_multi_ended_allocator_* */
    KVPOOL_KV_UNIFIED_SWA_ALLOCATOR = 1,   /* kvpool_unified_swa_allocator_* */
    KVPOOL_KV_UNIFIED_MAMBA_ALLOCATOR = 2, /* kvpool_unified_mamba_allocator_* */
    KVPOOL_KV_UNIFIED_MAMBA_SWA_ALLOCATOR =
        3 /* the tri-pool: kvpool_unified_mamba_swa_allocator_* */
};

/* A KV handle on each kind of allocator. */
KVPOOL_C_EXPORT kvpool_status kvpool_multi_ended_allocator_kv(kvpool_multi_ended_allocator* a,
                                                              kvpool_kv_allocator** out);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_swa_allocator_kv(kvpool_unified_swa_allocator* pair,
                                                              kvpool_kv_allocator** out);
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_mamba_allocator_kv(kvpool_unified_mamba_allocator* pair, kvpool_kv_allocator** out);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_kv(
    kvpool_unified_mamba_swa_allocator* tri, kvpool_kv_allocator** out);
KVPOOL_C_EXPORT void kvpool_kv_destroy(kvpool_kv_allocator* kv);

/* The KVPOOL_KV_* kind, and the number of sides (1 for a side, 2 for a pair, 3
 * for the tri-pool). */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_kind(const kvpool_kv_allocator* kv, int* kind, int* sides);
/* A handle on side which, numbered as kvpool_*_side numbers them (0: the full
 * side, which mints the token ids; a side's only side is itself); destroyed
 * with kvpool_multi_ended_allocator_destroy. Stands for kvpool_*_side. */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_side(kvpool_kv_allocator* kv, int which,
                                             kvpool_multi_ended_allocator** out);
/* caller_checks 1: the caller checks that every array it passes to this
 * handle's calls is memory of the handle's device, and every *_host array host
 * memory, as kvpool's Python package does through torch; the calls then ask
 * the GPU runtime nothing about them (a cudaPointerGetAttributes or
 * hipPointerGetAttributes per array, a large part of a short call's host time).
 * 0, the default: each array is checked as c_api.h says. A host build asks
 * nothing either way. Another value: KVPOOL_ERROR_INVALID_ARGUMENT. */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_set_caller_checks_memory(kvpool_kv_allocator* kv,
                                                                  int caller_checks);
/* KV tokens one allocation gets now: kvpool_allocator_state.available_size of a
 * side, available_size of the composite's sizes struct. */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_available_size(const kvpool_kv_allocator* kv, int64_t* out);

/* Allocation, as kvpool_multi_ended_allocator_alloc, _alloc_extend and _alloc_decode (a
 * composite: every KV side or none, asking its eviction callback when short). */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_alloc(kvpool_kv_allocator* kv, void* stream,
                                              int64_t need_size, int64_t* out, int* allocated);
KVPOOL_C_EXPORT kvpool_status kvpool_kv_alloc_extend(kvpool_kv_allocator* kv, void* stream,
                                                     const int64_t* prefix_lens_host,
                                                     const int64_t* seq_lens_host, int64_t batch,
                                                     const int64_t* last_loc, int64_t* out,
                                                     int64_t out_length, int* allocated);
KVPOOL_C_EXPORT kvpool_status kvpool_kv_alloc_decode(kvpool_kv_allocator* kv, void* stream,
                                                     const int64_t* seq_lens_host, int64_t batch,
                                                     const int64_t* last_loc, int64_t* out,
                                                     int* allocated);
/* count state slots into out (device), or *allocated = 0: the Mamba pair and
 * the tri-pool (kvpool_*_alloc_state_slots). */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_alloc_state_slots(kvpool_kv_allocator* kv, void* stream,
                                                          int64_t count, int64_t* out,
                                                          int* allocated);

/* Frees these virtual tokens (host) on every KV side: kvpool_multi_ended_allocator_free
 * (skip_unbound 0), kvpool_unified_swa_allocator_free, kvpool_unified_mamba_swa_allocator_free; the
 * Mamba pair's full side. */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_free(kvpool_kv_allocator* kv, void* stream,
                                             const int64_t* virtual_tokens_host, int64_t count);
/* Tokens that left the window: the sliding-window side only (kvpool_*_free_swa). */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_free_swa(kvpool_kv_allocator* kv, void* stream,
                                                 const int64_t* virtual_tokens_host, int64_t count);
/* Frees on any side between these two calls compact together. */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_free_group_begin(kvpool_kv_allocator* kv);
KVPOOL_C_EXPORT kvpool_status kvpool_kv_free_group_end(kvpool_kv_allocator* kv, void* stream);
/* One opportunistic lazy compaction pass over every side (kvpool_multi_ended_allocator_flush
 * with urgent 0, kvpool_unified_mamba_swa_allocator_flush_opportunistic); *moved (may be NULL):
 * pages moved. */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_flush(kvpool_kv_allocator* kv, void* stream,
                                              int64_t* moved);
KVPOOL_C_EXPORT kvpool_status kvpool_kv_drain_pending_reuse(kvpool_kv_allocator* kv);

/* The forward's hooks on every side (token may be NULL), as
 * kvpool_multi_ended_allocator_set_latest_forward_done and _set_inflight_forward. */
KVPOOL_C_EXPORT kvpool_status
kvpool_kv_set_latest_forward_done(kvpool_kv_allocator* kv, const kvpool_completion_token* token);
KVPOOL_C_EXPORT kvpool_status kvpool_kv_set_inflight_forward(kvpool_kv_allocator* kv,
                                                             const kvpool_completion_token* token,
                                                             const int64_t* virtual_tokens_host,
                                                             int64_t count);
/* The move gate (kvpool_multi_ended_allocator_gate_transfer) on these tokens on every KV
 * side and on these state slots (host arrays; slot_count must be 0 without a
 * state side); checked on every side first. */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_gate_transfer(
    kvpool_kv_allocator* kv, const kvpool_completion_token* token,
    const int64_t* virtual_tokens_host, int64_t count, const int64_t* state_slots_host,
    int64_t slot_count);
/* Virtual -> physical token ids of the full side (side 0), as
 * kvpool_multi_ended_allocator_translate. */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_translate(const kvpool_kv_allocator* kv, void* stream,
                                                  const int64_t* virtual_tokens, int64_t n,
                                                  void* out, int out_int32);

/* The composite's eviction callback (kvpool_*_set_eviction_callback). */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_set_eviction_callback(kvpool_kv_allocator* kv,
                                                              kvpool_evict_fn evict, void* user);
/* kvpool_*_state_digest (c_api_digest.h). */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_state_digest(const kvpool_kv_allocator* kv, uint64_t* out);

/* The backup window over every side (kvpool_*_backup_state, _restore_state,
 * _commit_state). A snapshot of another allocator, of a closed window, or
 * made stale by an earlier restore: KVPOOL_ERROR_INVALID_STATE. */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_backup_state(kvpool_kv_allocator* kv,
                                                     kvpool_kv_snapshot** out);
KVPOOL_C_EXPORT kvpool_status kvpool_kv_restore_state(kvpool_kv_allocator* kv, void* stream,
                                                      const kvpool_kv_snapshot* snapshot);
KVPOOL_C_EXPORT kvpool_status kvpool_kv_commit_state(kvpool_kv_allocator* kv,
                                                     const kvpool_kv_snapshot* snapshot);
KVPOOL_C_EXPORT void kvpool_kv_snapshot_destroy(kvpool_kv_snapshot* snapshot);

/* Frees everything on every side (kvpool_*_clear). */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_clear(kvpool_kv_allocator* kv, void* stream);
/* Every side's host state and device tables checked (fences the stream). */
KVPOOL_C_EXPORT kvpool_status kvpool_kv_check_invariants(const kvpool_kv_allocator* kv,
                                                         void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_C_API_KV_H */
