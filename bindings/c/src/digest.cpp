// C API: the state digests of a side and of each composite (c_api_digest.h).
#include "pairs.hpp"

#include <kvpool/c_api_digest.h>

using namespace kvpool::capi;

extern "C" {

kvpool_status kvpool_multi_ended_allocator_state_digest(const kvpool_multi_ended_allocator* a,
                                                        uint64_t* out) {
    return on(a, "allocator", [&](auto& ref) { deref(out, "out") = ref.side->state_digest(); });
}

kvpool_status kvpool_unified_swa_allocator_state_digest(const kvpool_unified_swa_allocator* pair,
                                                        uint64_t* out) {
    return on_pair(pair, [&](const auto& p, auto&) { deref(out, "out") = p.state_digest(); });
}

kvpool_status
kvpool_unified_mamba_allocator_state_digest(const kvpool_unified_mamba_allocator* pair,
                                            uint64_t* out) {
    return on_pair(pair, [&](const auto& p, auto&) { deref(out, "out") = p.state_digest(); });
}

kvpool_status
kvpool_unified_mamba_swa_allocator_state_digest(const kvpool_unified_mamba_swa_allocator* tri,
                                                uint64_t* out) {
    return on_pair(tri, [&](const auto& p, auto&) { deref(out, "out") = p.state_digest(); });
}

} // extern "C"
