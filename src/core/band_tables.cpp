#include <kvpool/detail/core/band_tables.hpp>
#include <kvpool/detail/state_digest.hpp>

#include <algorithm>
#include <vector>

namespace kvpool::detail {

void BandTables::append_physical(const index_t* virtual_pages, std::size_t n,
                                 std::vector<index_t>& physical) const {
    const index_t* const rows = v2p.data();
    for_each_run(virtual_pages, n, [&](std::size_t i, std::size_t count) {
        physical.insert(physical.end(), rows + virtual_pages[i], rows + virtual_pages[i] + count);
    });
}

void BandTables::unbind(const index_t* virtual_pages, const index_t* physical_pages, std::size_t n,
                        PageState state) {
    // Each table's rows go by the runs of the pages that index it (a v2p row
    // is unbound whichever page it held, a p2v row whichever page held it),
    // so that a request's pages bound in opposite directions (a band growing
    // down) are still a stretch per table: one journaled stretch per run
    // when long, else row by row.
    for_each_row_range(virtual_pages, n, [&](index_t first, std::size_t count) {
        const auto v = static_cast<std::size_t>(first);
        if (count >= min_stretch_pages) {
            v2p.fill(v, v + count, unbound);
            return;
        }
        for (std::size_t k = 0; k < count; ++k)
            v2p.set(v + k, unbound);
    });
    for_each_row_range(physical_pages, n, [&](index_t first, std::size_t count) {
        const auto p = static_cast<std::size_t>(first);
        if (count >= min_stretch_pages) {
            p2v.fill(p, p + count, unbound);
            page_state.fill(p, p + count, state);
            return;
        }
        for (std::size_t k = 0; k < count; ++k) {
            p2v.set(p + k, unbound);
            page_state.set(p + k, state);
        }
    });
}

void BandTables::undo_binding(const PageBinding& binding, bool from_free_list, DevicePlan& plan) {
    const auto& virtual_pages = binding.virtual_pages;
    const auto& physical_pages = binding.physical_pages;
    const std::size_t n = virtual_pages.size();
    const std::size_t drained_holes = binding.drained_holes;
    // The drained holes go back to being holes, the pages past them outside.
    unbind(virtual_pages.data(), physical_pages.data(), drained_holes, PageState::hole);
    unbind(virtual_pages.data() + drained_holes, physical_pages.data() + drained_holes,
           n - drained_holes, PageState::outside);
    plan.v2p_index.insert(plan.v2p_index.end(), virtual_pages.begin(), virtual_pages.end());
    plan.v2p_value.insert(plan.v2p_value.end(), n, unbound);
    plan.p2v_index.insert(plan.p2v_index.end(), physical_pages.begin(), physical_pages.end());
    plan.p2v_value.insert(plan.p2v_value.end(), n, unbound);
    if (binding.hole_positions.empty())
        holes.insert_front(physical_pages.begin(),
                           physical_pages.begin() + static_cast<std::ptrdiff_t>(drained_holes));
    else
        for (std::size_t i = 0; i < drained_holes; ++i)
            holes.insert_at(binding.hole_positions[i], physical_pages[i]);
    if (from_free_list)
        free_virtual_pages.insert_front(virtual_pages.data(), virtual_pages.data() + n);
    watermark = binding.watermark_before;
    anchor = binding.anchor_before;
    live_pages -= static_cast<index_t>(virtual_pages.size());
}

void BandTables::add_to(StateDigest& digest) const {
    digest.add_signed(virtual_table_pages);
    digest.add_signed(min_virtual_page);
    digest.add_signed(watermark);
    digest.add_signed(anchor);
    digest.add_signed(live_pages);
    digest.add_range(free_virtual_pages);
    digest.add_table(v2p);
    digest.add_table(p2v);
    digest.add_table(page_state);
    digest.add_range(holes.items());
}

} // namespace kvpool::detail
