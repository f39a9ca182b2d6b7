// Whether pages on both sides of one unified buffer can be had at once. An
// allocation that falls short packs the sides (lazy mode), so every hole
// counts as gap: the pages must fit each side's id space (its cap, in a fixed
// split), and their bytes the gap plus both sides' holes.
#pragma once

#include <kvpool/allocator_occupancy.hpp>

namespace kvpool::sim {

bool two_sided_fits(const AllocatorOccupancy& first, index_t first_pages,
                    const AllocatorOccupancy& second, index_t second_pages);

} // namespace kvpool::sim
