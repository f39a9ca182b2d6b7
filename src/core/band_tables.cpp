#include <kvpool/detail/core/band_tables.hpp>
#include <kvpool/detail/state_digest.hpp>

#include <algorithm>
#include <iterator>
#include <vector>

namespace kvpool::detail {

namespace {

// Rows [first, first + count) of table set to value: one journaled stretch
// when min_stretch_pages or more, else row by row.
template <class T>
void set_rows(JournaledTable<T>& table, std::size_t first, std::size_t count, T value) {
    if (count >= min_stretch_pages) {
        table.fill(first, first + count, value);
        return;
    }
    for (std::size_t k = 0; k < count; ++k)
        table.set(first + k, value);
}

// Row rows.at(k) of table set to values.at(k) (runs of one count), likewise:
// in row order the values step by one too, up or down.
void set_rows(JournaledTable<mirror_index_t>& table, const SteppedRun& rows,
              const SteppedRun& values) {
    const auto first = static_cast<std::size_t>(rows.low());
    const auto count = static_cast<std::size_t>(rows.count);
    const auto start = static_cast<mirror_index_t>(values.at(rows.step == 1 ? 0 : rows.count - 1));
    const auto step = static_cast<mirror_index_t>(rows.step * values.step);
    if (count >= min_stretch_pages) {
        table.set_run(first, count, start, step);
        return;
    }
    for (std::size_t k = 0; k < count; ++k)
        table.set(first + k, start + static_cast<mirror_index_t>(k) * step);
}

// Appends table[ids[k]] for each k, widened: a stretch of ids stepping by
// one either way is one copy of adjacent rows.
void append_rows(const JournaledTable<mirror_index_t>& table, const index_t* ids, std::size_t n,
                 std::vector<index_t>& out) {
    const mirror_index_t* const rows = table.data();
    for_each_stepped_run(ids, n, [&](std::size_t i, std::size_t count, index_t step) {
        const mirror_index_t* const first = rows + ids[i];
        if (step > 0)
            out.insert(out.end(), first, first + count);
        else
            out.insert(out.end(), std::make_reverse_iterator(first + 1),
                       std::make_reverse_iterator(first + 1 - count));
    });
}

} // namespace

void BandTables::bind_run(const SteppedRun& virtual_pages, const SteppedRun& physical_pages) {
    set_rows(v2p, virtual_pages, physical_pages);
    set_rows(p2v, physical_pages, virtual_pages);
    set_rows(page_state, static_cast<std::size_t>(physical_pages.low()),
             static_cast<std::size_t>(physical_pages.count), PageState::live);
}

void BandTables::unbind_run(const SteppedRun& virtual_pages, const SteppedRun& physical_pages,
                            PageState state) {
    const auto n = static_cast<std::size_t>(virtual_pages.count);
    const auto p = static_cast<std::size_t>(physical_pages.low());
    set_rows(v2p, static_cast<std::size_t>(virtual_pages.low()), n, mirror_index_t(unbound));
    set_rows(p2v, p, n, mirror_index_t(unbound));
    set_rows(page_state, p, n, state);
}

void BandTables::append_physical(const index_t* virtual_pages, std::size_t n,
                                 std::vector<index_t>& physical) const {
    append_rows(v2p, virtual_pages, n, physical);
}

void BandTables::append_virtual(const index_t* physical_pages, std::size_t n,
                                std::vector<index_t>& virtual_pages) const {
    append_rows(p2v, physical_pages, n, virtual_pages);
}

void BandTables::unbind(const index_t* virtual_pages, const index_t* physical_pages, std::size_t n,
                        PageState state) {
    // Each table's rows go by the runs of the pages that index it (a v2p row
    // is unbound whichever page it held, a p2v row whichever page held it),
    // so that a request's pages bound in opposite directions (a band growing
    // down) are still a stretch per table: one journaled stretch per run
    // when long, else row by row.
    for_each_row_range(virtual_pages, n, [&](index_t first, std::size_t count) {
        set_rows(v2p, static_cast<std::size_t>(first), count, mirror_index_t(unbound));
    });
    for_each_row_range(physical_pages, n, [&](index_t first, std::size_t count) {
        set_rows(p2v, static_cast<std::size_t>(first), count, mirror_index_t(unbound));
        set_rows(page_state, static_cast<std::size_t>(first), count, state);
    });
}

void BandTables::undo_binding(const PageBinding& binding, bool from_free_list, DevicePlan& plan) {
    const PageRunList& virtual_pages = binding.virtual_pages;
    const PageRunList& physical_pages = binding.physical_pages;
    const std::size_t n = virtual_pages.size();
    const std::size_t drained_holes = binding.drained_holes;
    // The drained holes go back to being holes, the pages past them outside:
    // a paired run across that line is unbound in two parts.
    std::size_t at = 0;
    for_each_paired_run(
        virtual_pages, physical_pages, [&](const SteppedRun& v, const SteppedRun& p) {
            const auto c = static_cast<std::size_t>(v.count);
            const auto h =
                static_cast<index_t>(at < drained_holes ? std::min(c, drained_holes - at) : 0);
            unbind_run({v.first, h, v.step}, {p.first, h, p.step}, PageState::hole);
            unbind_run({v.at(h), v.count - h, v.step}, {p.at(h), p.count - h, p.step},
                       PageState::outside);
            at += c;
        });
    plan.v2p_index.insert(plan.v2p_index.end(), virtual_pages.begin(), virtual_pages.end());
    plan.v2p_value.insert(plan.v2p_value.end(), n, unbound);
    plan.p2v_index.insert(plan.p2v_index.end(), physical_pages.begin(), physical_pages.end());
    plan.p2v_value.insert(plan.p2v_value.end(), n, unbound);
    std::vector<index_t> drained;
    for (auto it = physical_pages.begin(); drained.size() < drained_holes; ++it)
        drained.push_back(*it);
    if (binding.hole_positions.empty())
        holes.insert_front(drained.begin(), drained.end());
    else
        for (std::size_t i = 0; i < drained_holes; ++i)
            holes.insert_at(binding.hole_positions[i], drained[i]);
    if (from_free_list) {
        // The ids came from the free list's runs: back a run at a time.
        std::vector<IdRun<index_t>> pieces;
        for (const SteppedRun& r : virtual_pages.runs())
            for (index_t k = 0; k < (r.step == 1 ? 1 : r.count); ++k)
                pieces.push_back({r.at(k), r.step == 1 ? r.count : 1});
        free_virtual_pages.insert_front_runs(pieces);
    }
    watermark = binding.watermark_before;
    anchor = binding.anchor_before;
    live_pages -= static_cast<index_t>(n);
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
