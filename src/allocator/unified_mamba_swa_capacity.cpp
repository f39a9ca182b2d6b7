#include <kvpool/detail/unified_mamba_swa_capacity.hpp>

#include <algorithm>

namespace kvpool::detail {

index_t unified_mamba_swa_available_pages(const AllocatorCore& full, const AllocatorCore& swa) {
    const index_t full_page = full.geometry().page_bytes;
    const index_t swa_page = swa.geometry().page_bytes;
    const index_t above = swa.gap_above_bytes();              // shared with the full side
    const index_t below = swa.gap_below_bytes();              // the SWA side's alone
    const index_t ratio = full.page_size() / swa.page_size(); // SWA pages per full page
    const index_t full_holes = full.usable_hole_pages();
    const index_t swa_holes = swa.usable_hole_pages();
    const bool shifts = swa.shiftable_bytes(false) > 0;
    const auto fits = [&](index_t pages) {
        const index_t full_new = std::max<index_t>(0, pages - full_holes);
        const index_t swa_new = std::max<index_t>(0, ratio * pages - swa_holes);
        if (shifts)
            return full_new * full_page + swa_new * swa_page <= above + below - 2 * swa_page;
        if (full_new > above / full_page)
            return false;
        return swa_new <= (above - full_new * full_page) / swa_page + below / swa_page;
    };
    index_t lo = 0;
    index_t hi = std::min({full.free_virtual_page_count(), full_holes + full.index_headroom_pages(),
                           (swa_holes + swa.index_headroom_pages()) / ratio});
    // The largest page count that fits: fits() is monotone.
    while (lo < hi) {
        const index_t mid = lo + (hi - lo + 1) / 2;
        if (fits(mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

} // namespace kvpool::detail
