/* kvpool's C API, the state digests of tensor-parallel ranks: part of c_api.h,
 * which includes this header (include either; the conventions are c_api.h's). */
#ifndef KVPOOL_C_API_DIGEST_H
#define KVPOOL_C_API_DIGEST_H

#include "c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ state digests
 * Tensor-parallel ranks (README, "Tensor-parallel ranks"): processes driven
 * with the same calls must make the same decisions. *out is a 64-bit digest of
 * every host table that decides a side's future calls: its geometry and
 * options, the host mirror of its device tables, free virtual ids and holes in
 * their order, its extent, a free group's queued ids, pages awaiting reuse, the
 * forward's write set, transfer gates and the backup window's undo log (tokens
 * count as set or not, never as complete). Equal states give equal digests in
 * every process and on every machine; a composite's digest combines its
 * sides'. An engine compares its ranks' digests (an all-gather of the value)
 * every few steps: a difference is a divergence. Host only: no device read, no
 * fence; nothing changes. */
KVPOOL_C_EXPORT kvpool_status
kvpool_multi_ended_allocator_state_digest(const kvpool_multi_ended_allocator* a, uint64_t* out);
KVPOOL_C_EXPORT kvpool_status
kvpool_unified_swa_allocator_state_digest(const kvpool_unified_swa_allocator* pair, uint64_t* out);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_allocator_state_digest(
    const kvpool_unified_mamba_allocator* pair, uint64_t* out);
KVPOOL_C_EXPORT kvpool_status kvpool_unified_mamba_swa_allocator_state_digest(
    const kvpool_unified_mamba_swa_allocator* tri, uint64_t* out);

#ifdef __cplusplus
}
#endif
#endif /* KVPOOL_C_API_DIGEST_H */
