// Joint capacity of the full + sliding-window part of a
// UnifiedMambaSWAAllocator (the tri-pool): every full page costs ratio = full
// page size / SWA page size pages on the floating SWA side, out of the two
// gaps around the SWA band. Host only.
#pragma once

#include <kvpool/detail/allocator_core.hpp>

namespace kvpool::detail {

// Full-side pages an allocation on both sides always gets now (a lower bound;
// the shortfall ladder may reach more). As in the SWA pair, k pages need
// max(0, k - full holes) new full pages and max(0, ratio * k - SWA holes) new
// SWA pages. The full side's new pages come from the gap above the SWA band,
// which the SWA band widens by shifting down into the gap below it (unless a
// transfer or a backup window holds it); the SWA side's new pages come from
// what is left of both gaps, less an SWA page of slack in each. Capped by
// both sides' index space and the full side's free ids.
index_t unified_mamba_swa_available_pages(const AllocatorCore& full, const AllocatorCore& swa);

} // namespace kvpool::detail
