// The allocator core's self-checks: the invariants check_invariants() walks,
// the internal error that reports a broken one, the state string every error
// message carries, and the state digest ranks compare.
#include "band_direction.hpp"

#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/detail/state_digest.hpp>
#include <kvpool/error.hpp>

#include <fmt/format.h>

#include <vector>

namespace kvpool::detail {

void AllocatorCore::fail(const std::string& what) const {
    throw Error(ErrorCode::internal, fmt::format("{}: invariant broken: {}. State: {}",
                                                 geometry_.spec.name, what, state_string()));
}

void AllocatorCore::check_invariants() const {
    const index_t vpages = tables_.virtual_table_pages;
    const index_t ppages = geometry_.num_physical_pages;
    const index_t min_page = geometry_.min_page_index;
    const index_t min_virtual = tables_.min_virtual_page;
    const BandDirection band(geometry_, tables_.anchor);
    if (tables_.v2p[0] != 0 || tables_.p2v[0] != 0)
        fail("the padding anchor 0 <-> 0 is gone");
    const index_t band_lo = band.band_begin(tables_.watermark);
    const index_t band_hi = band.band_end(tables_.watermark);
    if (band_lo < min_page || band_hi > ppages || band_lo > band_hi)
        fail(fmt::format("band [{}, {}) outside [{}, {})", band_lo, band_hi, min_page, ppages));

    index_t live = 0, holes = 0, pending = 0;
    for (index_t p = min_page; p < ppages; ++p) {
        const bool in_band = p >= band_lo && p < band_hi;
        const PageState s = tables_.page_state[p];
        if (!in_band && s != PageState::outside)
            fail(fmt::format("page {} outside the band is not free", p));
        if (in_band && s == PageState::outside)
            fail(fmt::format("page {} inside the band is in no state", p));
        if (s == PageState::moved_out)
            fail(fmt::format("page {} left in the moved-out state", p));
        if (s == PageState::live) {
            ++live;
            const index_t v = tables_.p2v[p];
            if (v < min_virtual || v >= vpages || tables_.v2p[v] != p)
                fail(fmt::format("p2v[{}] = {} is not the inverse of v2p", p, v));
        } else if (tables_.p2v[p] != unbound) {
            fail(fmt::format("page {} is not live but p2v = {}", p, tables_.p2v[p]));
        }
        holes += s == PageState::hole;
        pending += s == PageState::pending;
    }
    if (live != tables_.live_pages)
        fail(fmt::format("{} live pages counted, {} recorded", live, tables_.live_pages));
    if (holes != hole_pages())
        fail(fmt::format("{} holes counted, {} listed", holes, hole_pages()));
    if (pending != compaction_.pending_pages())
        fail(fmt::format("{} pending pages counted, {} recorded", pending,
                         compaction_.pending_pages()));
    for (index_t p : tables_.holes)
        if (tables_.page_state[p] != PageState::hole)
            fail(fmt::format("listed hole {} is not a hole", p));
    for (const auto& batch : compaction_.pending_batches())
        for (index_t p : batch.pages)
            if (tables_.page_state[p] != PageState::pending)
                fail(fmt::format("pending page {} is not pending", p));
    if (live + holes + pending != band_pages())
        fail(fmt::format("conservation: live {} + holes {} + pending {} != band {}", live, holes,
                         pending, band_pages()));
    if (!is_lazy() && (holes != 0 || pending != 0))
        fail("eager mode holds holes");

    index_t bound = 0;
    for (index_t v = min_virtual; v < vpages; ++v) {
        if (tables_.v2p[v] == unbound)
            continue;
        ++bound;
        const index_t p = tables_.v2p[v];
        if (p < band_lo || p >= band_hi || tables_.page_state[p] != PageState::live ||
            tables_.p2v[p] != v)
            fail(fmt::format("v2p[{}] = {} is not a live page mapped back", v, p));
    }
    if (bound != live)
        fail(fmt::format("{} virtual pages bound, {} live", bound, live));

    if (options_.is_id_owner) {
        std::vector<char> seen(static_cast<std::size_t>(vpages), 0);
        for (index_t v : tables_.free_virtual_pages) {
            if (v < min_virtual || v >= vpages || tables_.v2p[v] != unbound || seen[v])
                fail(fmt::format("free virtual id {} is bound, repeated or out of range", v));
            seen[v] = 1;
        }
        if (static_cast<index_t>(tables_.free_virtual_pages.size()) + live !=
            geometry_.page_capacity())
            fail(fmt::format("conservation: free ids {} + live {} != capacity {}",
                             tables_.free_virtual_pages.size(), live, geometry_.page_capacity()));
    }
    if (upper_ && byte_high_frontier() > upper_->byte_low_frontier())
        fail(fmt::format("the band overlaps the band of '{}' above it",
                         upper_->geometry_.spec.name));
    if (lower_ && lower_->byte_high_frontier() > byte_low_frontier())
        fail(fmt::format("the band overlaps the band of '{}' below it",
                         lower_->geometry_.spec.name));
    const BufferBytes b = buffer_bytes();
    if (b.accounted() != b.buffer || b.overlap != 0)
        fail(fmt::format("byte conservation over the buffer: live {} + holes {} + pending {} + "
                         "gaps {} + sink {} + alignment {} - overlap {} = {} bytes, the buffer "
                         "holds {}",
                         b.live, b.holes, b.pending, b.gaps, b.sink, b.alignment, b.overlap,
                         b.accounted(), b.buffer));
}

BufferBytes AllocatorCore::buffer_bytes() const {
    const AllocatorCore* band = this;
    while (band->lower_)
        band = band->lower_;
    BufferBytes b;
    b.buffer = total_bytes_;
    const SubPoolGeometry& lowest = band->geometry_;
    const index_t first_byte = lowest.min_page_index * lowest.page_bytes;
    b.sink = lowest.sink_bytes;
    b.alignment = first_byte - lowest.sink_bytes;
    // An up band starts at its first page: no gap can lie below it, so bytes
    // there (a band off its anchor) are in no term and the account falls short.
    if (lowest.grow() != GrowDirection::up)
        b.gaps += band->byte_low_frontier() - first_byte;
    for (; band; band = band->upper_) {
        const index_t page_bytes = band->geometry_.page_bytes;
        b.live += band->tables_.live_pages * page_bytes;
        b.holes += band->hole_pages() * page_bytes;
        b.pending += band->compaction_.pending_pages() * page_bytes;
        if (band->upper_) {
            const index_t gap = band->upper_->byte_low_frontier() - band->byte_high_frontier();
            if (gap >= 0)
                b.gaps += gap;
            else
                b.overlap -= gap;
            continue;
        }
        const index_t last_byte = band->geometry_.num_physical_pages * page_bytes;
        b.alignment += total_bytes_ - last_byte;
        if (band->geometry_.grow() != GrowDirection::down)
            b.gaps += last_byte - band->byte_high_frontier();
    }
    return b;
}

std::string AllocatorCore::state_string() const {
    return fmt::format(
        "sub_pool='{}' grow={} mode={} id_owner={} page_size={} pages={} virtual_pages={} "
        "min_page={} anchor={} watermark={} band={} live={} holes={} pending={} free_ids={} "
        "gap_bytes={}",
        geometry_.spec.name, to_string(geometry_.grow()), to_string(options_.mode),
        options_.is_id_owner, page_size(), geometry_.num_physical_pages,
        tables_.virtual_table_pages, geometry_.min_page_index, tables_.anchor, tables_.watermark,
        band_pages(), tables_.live_pages, hole_pages(), compaction_.pending_pages(),
        free_virtual_page_count(), gap_bytes());
}

std::uint64_t AllocatorCore::state_digest() const {
    StateDigest d;
    const SubPoolSpec& spec = geometry_.spec;
    d.add_string(spec.name);
    d.add(static_cast<std::uint64_t>(spec.grow));
    d.add_signed(spec.page_size);
    d.add_signed(spec.entry_bytes);
    d.add_signed(geometry_.page_bytes);
    d.add_signed(geometry_.num_physical_pages);
    d.add_signed(geometry_.num_virtual_pages);
    d.add_signed(geometry_.min_page_index);
    d.add(geometry_.position);
    d.add_signed(geometry_.start_page);
    d.add_signed(total_bytes_);
    d.add(static_cast<std::uint64_t>(options_.mode));
    d.add_bool(options_.is_id_owner);
    d.add_signed(options_.max_moves_per_flush);
    d.add_bool(options_.zero_on_alloc);
    // Which neighbours are bound (not where they are: addresses differ between ranks).
    d.add_bool(lower_ != nullptr);
    d.add_bool(upper_ != nullptr);
    d.add_bool(relocations_held_);
    d.add_bool(in_free_group_);
    d.add_range(free_group_tokens_.items());
    tables_.add_to(d);
    gate_.add_to(d);
    compaction_.add_to(d);
    backup_.add_to(d);
    return d.value();
}

} // namespace kvpool::detail
