#include <kvpool/detail/core/band_tables.hpp>
#include <kvpool/detail/state_digest.hpp>

namespace kvpool::detail {

void BandTables::undo_binding(const PageBinding& binding, bool from_free_list, DevicePlan& plan) {
    const auto& virtual_pages = binding.virtual_pages;
    const auto& physical_pages = binding.physical_pages;
    const std::size_t drained_holes = binding.drained_holes;
    for (std::size_t i = 0; i < virtual_pages.size(); ++i) {
        const index_t v = virtual_pages[i], p = physical_pages[i];
        v2p.set(v, unbound);
        p2v.set(p, unbound);
        plan.set_v2p(v, unbound);
        plan.set_p2v(p, unbound);
        page_state.set(p, i < drained_holes ? PageState::hole : PageState::outside);
    }
    if (binding.hole_positions.empty())
        for (std::size_t i = drained_holes; i-- > 0;)
            holes.push_front(physical_pages[i]);
    else
        for (std::size_t i = 0; i < drained_holes; ++i)
            holes.insert_at(binding.hole_positions[i], physical_pages[i]);
    if (from_free_list)
        free_virtual_pages.insert_front(virtual_pages.begin(), virtual_pages.end());
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
    digest.add_range(free_virtual_pages.items());
    digest.add_table(v2p);
    digest.add_table(p2v);
    digest.add_table(page_state);
    digest.add_range(holes.items());
}

} // namespace kvpool::detail
