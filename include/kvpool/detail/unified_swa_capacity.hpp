// Joint capacity of a UnifiedSWAAllocator (the SWA pair): every token costs a
// page share on the full side and one on the SWA side, both out of the one gap
// between them. Host only.
#pragma once

#include <kvpool/detail/allocator_core.hpp>

namespace kvpool::detail {

// Full-side pages an SWA-pair allocation can take now (no compaction); each
// costs ratio = full page size / SWA page size pages on the SWA side. Each
// side takes its holes first and the rest from the one gap: k pages fit when
// max(0, k - full holes) full pages and max(0, ratio * k - SWA holes) SWA
// pages fit in the gap. Eager: the gap divided by both sides' bytes per full
// page. With ratio 1 this is the reference's three phases (both sides drain
// holes; the side with fewer holes extends while the other drains; both
// extend). Capped by each side's index space and id headroom.
index_t unified_swa_available_pages(const AllocatorCore& full, const AllocatorCore& swa);

} // namespace kvpool::detail
