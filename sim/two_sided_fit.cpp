#include "two_sided_fit.hpp"

namespace kvpool::sim {

bool two_sided_fits(const detail::AllocatorCore& first, index_t first_pages,
                    const detail::AllocatorCore& second, index_t second_pages) {
    if (first_pages > first.free_virtual_page_count() ||
        second_pages > second.free_virtual_page_count())
        return false;
    const index_t first_page_bytes = first.geometry().page_bytes;
    const index_t second_page_bytes = second.geometry().page_bytes;
    const index_t spare = first.gap_bytes() + first.hole_pages() * first_page_bytes +
                          second.hole_pages() * second_page_bytes;
    return first_pages * first_page_bytes + second_pages * second_page_bytes <= spare;
}

} // namespace kvpool::sim
