// The allocator core's allocations: room made by the neighbours' compaction
// when short, physical pages from the holes and then the gap, the binding in
// the tables, and its undo.
#include "band_direction.hpp"
#include "core_util.hpp"

#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace kvpool::detail {

bool AllocatorCore::ensure_room(index_t num_pages) {
    if (num_pages <= available_pages(0, 0))
        return true;
    // Only the neighbours' compaction releases gap bytes: packing our own band
    // trades a hole for a gap page one for one. An anchored lazy neighbour
    // flushes first; a floating one then shifts away.
    for (AllocatorCore* n : {lower_, upper_})
        if (n && !n->is_floating() && n->is_lazy())
            n->flush(true);
    // More gap cannot help a side out of ids or index space.
    if (num_pages > free_virtual_page_count() ||
        num_pages > index_headroom_pages() + usable_hole_pages())
        return false;
    const index_t pb = geometry_.page_bytes;
    // Between two floating bands, a lower one that cannot cover the whole
    // shortfall gives what it credits and the upper one the rest, as
    // schedulable_available_size() counts them.
    const bool two_floating = lower_ && lower_->is_floating() && upper_ && upper_->is_floating();
    for (AllocatorCore* n : {lower_, upper_}) {
        const index_t short_pages = num_pages - available_pages(0, 0);
        if (!n || !n->is_floating() || short_pages <= 0)
            continue;
        const bool above = n == upper_;
        if ((above && geometry_.grow() == GrowDirection::down) ||
            (!above && geometry_.grow() == GrowDirection::up))
            continue;
        const index_t gap = above ? gap_above_bytes() : gap_below_bytes();
        const auto shift_pages = [&](index_t pages) {
            return n->shift_away(above, (gap / pb + pages) * pb - gap);
        };
        if (shift_pages(short_pages) || above || !two_floating)
            continue;
        const index_t credited =
            available_pages(neighbour_credit_bytes(n), 0) - available_pages(0, 0);
        if (credited > 0)
            shift_pages(std::min(short_pages, credited));
    }
    return num_pages <= available_pages(0, 0);
}

void AllocatorCore::take_physical(index_t num_pages, PageBinding& binding) {
    PageRunList& out = binding.physical_pages;
    const index_t from_holes = std::min<index_t>(num_pages, usable_hole_pages());
    // Holes under a transfer stay where they are in the list; the positions of
    // the holes taken from between them put those back in place on an undo.
    const std::vector<index_t> gated = gated_pages();
    if (gated.empty()) {
        for (auto it = tables_.holes.begin(); out.size() < static_cast<std::size_t>(from_holes);
             ++it)
            out.push_back(*it);
        tables_.holes.erase_front(static_cast<std::size_t>(from_holes));
    }
    bool passed_gated = false;
    for (std::size_t i = 0; static_cast<index_t>(out.size()) < from_holes;) {
        if (std::binary_search(gated.begin(), gated.end(), tables_.holes[i])) {
            if (!passed_gated)
                for (std::size_t k = 0; k < out.size(); ++k)
                    binding.hole_positions.push_back(k);
            passed_gated = true;
            ++i;
            continue;
        }
        if (passed_gated)
            binding.hole_positions.push_back(i + out.size());
        out.push_back(tables_.holes[i]);
        tables_.holes.erase_at(i);
    }
    binding.drained_holes = static_cast<std::size_t>(from_holes);
    const index_t extend = num_pages - from_holes;
    if (is_floating()) {
        extend_floating(extend, out);
        return;
    }
    const BandDirection band(geometry_, tables_.anchor);
    tables_.watermark = band.grown(tables_.watermark, extend);
    const auto [first, last] = band.frontier_pages(tables_.watermark, extend);
    // Ascending, as the reference binds a pure extension on either side and
    // an up side's always; a down side's extension after drained holes it
    // binds from the old frontier outward (descending).
    if (band.up() || from_holes == 0)
        out.append_run(first, last - first);
    else
        out.append_descending(last - 1, last - first);
}

void AllocatorCore::extend_floating(index_t pages, PageRunList& out) {
    // Into the wider gap first, then the other: each new page, above the band
    // and below it, ascending.
    const index_t room_above = page_limit_above() - tables_.watermark;
    const index_t room_below = tables_.anchor - lowest_free_page();
    const bool above_first = room_above >= room_below;
    const index_t above =
        above_first ? std::min(pages, room_above) : pages - std::min(pages, room_below);
    const index_t below = pages - above;
    const auto push_above = [&] { out.append_run(tables_.watermark, above); };
    const auto push_below = [&] { out.append_run(tables_.anchor - below, below); };
    if (above_first) {
        push_above();
        push_below();
    } else {
        push_below();
        push_above();
    }
    tables_.watermark += above;
    tables_.anchor -= below;
}

void AllocatorCore::bind(const PageBinding& binding) {
    // A paired run (a fresh or dense band's prefill is one, whichever way
    // the band grows) as contiguous rows per table.
    for_each_paired_run(binding.virtual_pages, binding.physical_pages,
                        [&](const SteppedRun& v, const SteppedRun& p) { tables_.bind_run(v, p); });
    const auto n = static_cast<index_t>(binding.virtual_pages.size());
    tables_.live_pages += n;
    counters_.allocs += n == 0 ? 0 : 1;
    counters_.pages_allocated += n;
}

bool AllocatorCore::alloc_pages(index_t num_pages, PageBinding& out) {
    return alloc_pages(num_pages, out, ShortOfIds::flush_peer_first);
}

bool AllocatorCore::alloc_request_pages(index_t num_pages, PageBinding& out) {
    return alloc_pages(num_pages, out, ShortOfIds::fail_at_once);
}

bool AllocatorCore::alloc_pages(index_t num_pages, PageBinding& out, ShortOfIds short_of_ids) {
    out.clear();
    if (!options_.is_id_owner)
        throw Error(ErrorCode::wrong_role,
                    fmt::format("{}: alloc on a side that does not own its ids; bind the "
                                "peer's ids with alloc_with_virtual instead",
                                geometry_.spec.name));
    if (num_pages < 0)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: cannot allocate {} pages", geometry_.spec.name, num_pages));
    if (num_pages == 0)
        return true;
    const bool out_of_ids = num_pages > free_virtual_page_count();
    if ((out_of_ids && short_of_ids == ShortOfIds::fail_at_once) || !ensure_room(num_pages)) {
        ++counters_.failed_allocs;
        return false;
    }
    const Unjournaled quiet(transaction_scope(),
                            transaction_.take_allocation(out, true, backup_.is_open()));
    out.watermark_before = tables_.watermark;
    out.anchor_before = tables_.anchor;
    tables_.free_virtual_pages.take_front(static_cast<std::size_t>(num_pages), out.virtual_pages);
    take_physical(num_pages, out);
    bind(out);
    backup_.log(out, true);
    return true;
}

bool AllocatorCore::bind_virtual_pages(const index_t* virtual_pages, index_t count,
                                       PageBinding& out) {
    if (count < 0) {
        out.clear();
        check_role_to_bind();
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: negative page count {}", geometry_.spec.name, count));
    }
    bind_scratch_.assign(virtual_pages, static_cast<std::size_t>(count));
    return bind_virtual_pages(bind_scratch_, out);
}

void AllocatorCore::check_role_to_bind() const {
    if (options_.is_id_owner)
        throw Error(
            ErrorCode::wrong_role,
            fmt::format("{}: alloc_with_virtual on the id owner; use alloc", geometry_.spec.name));
}

bool AllocatorCore::virtual_runs_free(const PageRunList& virtual_pages) const {
    // Ascending runs, each past the last, inside the table and unbound: one
    // vectorised pass over each run's rows, no repeats possible.
    index_t next = tables_.min_virtual_page;
    for (const SteppedRun& r : virtual_pages.runs()) {
        if (r.step != 1 || r.first < next || r.first + r.count > tables_.virtual_table_pages ||
            !tables_.rows_unbound(r.first, r.count))
            return false;
        next = r.first + r.count;
    }
    return true;
}

std::vector<index_t> AllocatorCore::unbindable_pages(const PageRunList& pages) {
    // Pages not all in free runs, one by one: ascending ids cannot repeat and
    // are checked alone; the rest are checked for repeats by marking each page
    // in v2p as it is checked, marks undone before anything else reads the
    // table.
    const std::vector<index_t> ids = pages.to_vector();
    const auto count = static_cast<index_t>(ids.size());
    const index_t* const virtual_pages = ids.data();
    std::vector<index_t> bad;
    const auto outside_or_bound = [&](index_t v) {
        return v < tables_.min_virtual_page || v >= tables_.virtual_table_pages ||
               tables_.v2p[v] != unbound;
    };
    const bool ascending =
        std::adjacent_find(virtual_pages, virtual_pages + count,
                           [](index_t a, index_t b) { return a >= b; }) == virtual_pages + count;
    if (ascending) {
        for (index_t k = 0; k < count; ++k)
            if (outside_or_bound(virtual_pages[k]))
                bad.push_back(virtual_pages[k]);
        return bad;
    }
    constexpr index_t seen = unbound - 1;
    index_t checked = 0;
    // The marks undo themselves: a transaction need not journal them.
    const Unjournaled quiet(transaction_scope(), transaction_.is_open());
    for (; checked < count; ++checked) {
        const index_t v = virtual_pages[checked];
        if (outside_or_bound(v))
            bad.push_back(v);
        else
            tables_.v2p.set(v, seen);
    }
    for (index_t i = 0; i < checked; ++i) {
        const index_t v = virtual_pages[i];
        if (v >= tables_.min_virtual_page && v < tables_.virtual_table_pages &&
            tables_.v2p[v] == seen)
            tables_.v2p.set(v, unbound);
    }
    return bad;
}

bool AllocatorCore::bind_virtual_pages(const PageRunList& virtual_pages, PageBinding& out) {
    out.clear();
    check_role_to_bind();
    const auto count = static_cast<index_t>(virtual_pages.size());
    if (!virtual_runs_free(virtual_pages)) {
        const std::vector<index_t> bad = unbindable_pages(virtual_pages);
        if (!bad.empty())
            throw Error(ErrorCode::invalid_argument,
                        fmt::format("{}: cannot bind virtual pages {}: outside [{}, {}), already "
                                    "bound, or repeated. State: {}",
                                    geometry_.spec.name, first_ids(bad), tables_.min_virtual_page,
                                    tables_.virtual_table_pages, state_string()));
    }
    if (count == 0)
        return true;
    if (!ensure_room(count)) {
        ++counters_.failed_allocs;
        return false;
    }
    const Unjournaled quiet(transaction_scope(),
                            transaction_.take_allocation(out, false, backup_.is_open()));
    out.watermark_before = tables_.watermark;
    out.anchor_before = tables_.anchor;
    out.virtual_pages = virtual_pages;
    take_physical(count, out);
    bind(out);
    backup_.log(out, false);
    return true;
}

void AllocatorCore::undo_allocation(const PageBinding& binding) {
    if (binding.virtual_pages.empty())
        return;
    // The transaction's unjournaled allocation is undone unjournaled too.
    const bool unjournaled = transaction_.is_allocation(binding);
    const Unjournaled quiet(transaction_scope(), unjournaled);
    // An open backup window logged this allocation last: the undo consumes it.
    if (backup_.is_open())
        backup_.drop_last();
    tables_.undo_binding(binding, options_.is_id_owner, plan_);
    if (unjournaled)
        transaction_.drop_allocation();
    // The call answers "no allocation": it counts as one that failed.
    --counters_.allocs;
    counters_.pages_allocated -= static_cast<index_t>(binding.virtual_pages.size());
    ++counters_.failed_allocs;
}

} // namespace kvpool::detail
