// C API: the state digests of a side and of each composite (c_api_digest.h).
#include "pairs.hpp"

#include <kvpool/c_api_digest.h>

using namespace kvpool::capi;

extern "C" {

kvpool_status kvpool_allocator_state_digest(const kvpool_allocator* a, uint64_t* out) {
    return on(a, "allocator", [&](auto& ref) { deref(out, "out") = ref.side->state_digest(); });
}

kvpool_status kvpool_swa_pair_state_digest(const kvpool_swa_pair* pair, uint64_t* out) {
    return on_pair(pair, [&](const auto& p, auto&) { deref(out, "out") = p.state_digest(); });
}

kvpool_status kvpool_mamba_pair_state_digest(const kvpool_mamba_pair* pair, uint64_t* out) {
    return on_pair(pair, [&](const auto& p, auto&) { deref(out, "out") = p.state_digest(); });
}

kvpool_status kvpool_mamba_swa_state_digest(const kvpool_mamba_swa* tri, uint64_t* out) {
    return on_pair(tri, [&](const auto& p, auto&) { deref(out, "out") = p.state_digest(); });
}

} // extern "C"
