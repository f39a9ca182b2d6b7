// Whether state slots, sliding-window pages and full pages can be had at once
// in the tri-pool's buffer. As for two sides (two_sided_fit.hpp), every hole
// counts as gap (an allocation that falls short packs the lazy sides), and the
// floating sliding-window band shifts out of the way of either neighbour, so
// both gaps around it serve every side: the pages must fit each side's id
// space (its cap, in a fixed split), and their bytes both gaps plus every
// side's holes.
#pragma once

#include <kvpool/allocator_occupancy.hpp>

namespace kvpool::sim {

bool tri_pool_fits(const AllocatorOccupancy& state, index_t state_slots,
                   const AllocatorOccupancy& window, index_t window_pages,
                   const AllocatorOccupancy& full, index_t full_pages);

} // namespace kvpool::sim
