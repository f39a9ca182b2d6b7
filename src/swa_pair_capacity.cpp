#include <kvpool/detail/swa_pair_capacity.hpp>

#include <algorithm>

namespace kvpool::detail {

index_t swa_pair_available_pages(const AllocatorCore& full, const AllocatorCore& swa) {
    const index_t full_page_bytes = full.geometry().page_bytes;
    const index_t swa_page_bytes = swa.geometry().page_bytes;
    index_t gap = full.gap_bytes(); // the same band seen from either side
    const index_t full_holes = full.hole_pages();
    const index_t swa_holes = swa.hole_pages();

    const index_t both_drain = std::min(full_holes, swa_holes);
    const bool full_has_fewer = full_holes <= swa_holes;
    const index_t one_extends_bytes = full_has_fewer ? full_page_bytes : swa_page_bytes;
    const index_t one_extends =
        std::min((full_has_fewer ? swa_holes : full_holes) - both_drain, gap / one_extends_bytes);
    gap -= one_extends * one_extends_bytes;
    const index_t both_extend = gap / (full_page_bytes + swa_page_bytes);

    index_t pages = both_drain + one_extends + both_extend;
    pages = std::min({pages, full_holes + full.index_headroom_pages(),
                      swa_holes + swa.index_headroom_pages(), full.free_virtual_page_count(),
                      swa.free_virtual_page_count()});
    return std::max<index_t>(0, pages);
}

} // namespace kvpool::detail
