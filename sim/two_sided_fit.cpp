#include "two_sided_fit.hpp"

namespace kvpool::sim {

bool two_sided_fits(const AllocatorOccupancy& first, index_t first_pages,
                    const AllocatorOccupancy& second, index_t second_pages) {
    if (first_pages > first.free_virtual_pages || second_pages > second.free_virtual_pages)
        return false;
    const index_t spare = first.gap_bytes + first.hole_pages * first.page_bytes +
                          second.hole_pages * second.page_bytes;
    return first_pages * first.page_bytes + second_pages * second.page_bytes <= spare;
}

} // namespace kvpool::sim
