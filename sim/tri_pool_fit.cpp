#include "tri_pool_fit.hpp"

namespace kvpool::sim {

bool tri_pool_fits(const AllocatorOccupancy& state, index_t state_slots,
                   const AllocatorOccupancy& window, index_t window_pages,
                   const AllocatorOccupancy& full, index_t full_pages) {
    if (state_slots > state.free_virtual_pages || window_pages > window.free_virtual_pages ||
        full_pages > full.free_virtual_pages)
        return false;
    // The floating band's gap is both of its gaps: the neighbours' gaps are parts of it.
    const index_t spare = window.gap_bytes + state.hole_pages * state.page_bytes +
                          window.hole_pages * window.page_bytes + full.hole_pages * full.page_bytes;
    return state_slots * state.page_bytes + window_pages * window.page_bytes +
               full_pages * full.page_bytes <=
           spare;
}

} // namespace kvpool::sim
