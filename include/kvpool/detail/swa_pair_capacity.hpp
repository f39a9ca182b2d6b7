// Joint capacity of an SWA pair: every token costs a page share on the full side
// and one on the SWA side, both out of the one gap between them. Host only.
#pragma once

#include <kvpool/detail/allocator_core.hpp>

namespace kvpool::detail {

// Pages an SWA-pair allocation can take now (no compaction). Eager: the gap
// divided by both page sizes. Lazy, three phases: both sides drain holes; the
// side with fewer holes extends while the other drains; both extend. Capped by
// each side's index space and id headroom.
index_t swa_pair_available_pages(const AllocatorCore& full, const AllocatorCore& swa);

} // namespace kvpool::detail
