#include <kvpool/detail/unified_swa_capacity.hpp>

#include <algorithm>

namespace kvpool::detail {

index_t unified_swa_available_pages(const AllocatorCore& full, const AllocatorCore& swa) {
    const index_t full_page_bytes = full.geometry().page_bytes;
    const index_t swa_page_bytes = swa.geometry().page_bytes;
    const index_t ratio = full.page_size() / swa.page_size();
    const index_t gap = full.gap_bytes(); // the same band seen from either side
    const index_t full_holes = full.hole_pages();
    const index_t swa_holes = swa.hole_pages();

    // max(0, a) + max(0, b) <= gap holds when 0, a, b and a + b each do.
    index_t pages =
        std::min({full_holes + gap / full_page_bytes, (swa_holes + gap / swa_page_bytes) / ratio,
                  (gap + full_holes * full_page_bytes + swa_holes * swa_page_bytes) /
                      (full_page_bytes + ratio * swa_page_bytes)});
    pages = std::min({pages, full_holes + full.index_headroom_pages(),
                      (swa_holes + swa.index_headroom_pages()) / ratio,
                      full.free_virtual_page_count(), swa.free_virtual_page_count() / ratio});
    return std::max<index_t>(0, pages);
}

} // namespace kvpool::detail
