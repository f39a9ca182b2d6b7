#include "band_direction.hpp"
#include "core_util.hpp"

#include <kvpool/detail/core/compaction.hpp>
#include <kvpool/detail/state_digest.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace kvpool::detail {

namespace {

// The distinct pages in ascending order, into sorted: the stretches they
// come in (a request's pages, moved about in pieces by compaction) ordered
// by their lowest page, each written out ascending; pages too scattered for
// stretches to pay are sorted one by one.
void sort_distinct_pages(const index_t* pages, std::size_t n, std::vector<index_t>& sorted) {
    std::vector<IdRun<index_t>> stretches;
    for_each_row_range(pages, n, [&](index_t lowest, std::size_t count) {
        stretches.push_back({lowest, static_cast<index_t>(count)});
    });
    sorted.clear();
    if (8 * stretches.size() > n) {
        sorted.assign(pages, pages + n);
        std::sort(sorted.begin(), sorted.end());
        return;
    }
    std::sort(stretches.begin(), stretches.end(),
              [](const IdRun<index_t>& a, const IdRun<index_t>& b) { return a.first < b.first; });
    sorted.reserve(n);
    for (const IdRun<index_t>& s : stretches)
        append_run(sorted, s.first, s.count);
}

void note_holes_peak(const Band& band) {
    band.counters.holes_peak =
        std::max(band.counters.holes_peak, static_cast<index_t>(band.tables.holes.size()));
}

} // namespace

// ---------------------------------------------------------------- moves and frees

void Compaction::move_pages(const Band& band, const std::vector<index_t>& src, const index_t* dst,
                            PageState src_after, MoveStart start, const index_t* src_virtual) {
    BandTables& t = band.tables;
    DevicePlan& plan = band.plan;
    const std::size_t n = src.size();
    if (n == 0)
        return;
    plan.move_src.insert(plan.move_src.end(), src.begin(), src.end());
    plan.move_dst.insert(plan.move_dst.end(), dst, dst + n);
    if (start == MoveStart::early && move_starter_)
        move_starter_();
    // The moved virtual pages, read before any change: the plan's v2p rows.
    const std::size_t v0 = plan.v2p_index.size();
    if (src_virtual)
        plan.v2p_index.insert(plan.v2p_index.end(), src_virtual, src_virtual + n);
    else
        t.append_virtual(src.data(), n, plan.v2p_index);
    const index_t* const moved = plan.v2p_index.data() + v0;
    // Sources and destinations are disjoint, so every entry is saved before
    // any changes; where one table's entries are too scattered for stretches,
    // each change is logged instead.
    const bool v2p_saved = t.v2p.save_stretches(moved, n);
    const bool p2v_src_saved = t.p2v.save_stretches(src.data(), n);
    const bool p2v_dst_saved = t.p2v.save_stretches(dst, n);
    const bool state_src_saved = t.page_state.save_stretches(src.data(), n);
    const bool state_dst_saved = t.page_state.save_stretches(dst, n);
    // A loop per table and list, so that each tests its journal choice once;
    // saved, each stretch of rows (a run of pages, either way) is one loop.
    const auto write = [n](auto& table, bool saved, const index_t* at, const auto& value_of) {
        if (!saved) {
            for (std::size_t k = 0; k < n; ++k)
                table.set(static_cast<std::size_t>(at[k]), value_of(k));
            return;
        }
        for_each_stepped_run(at, n, [&](std::size_t i, std::size_t count, index_t step) {
            table.set_stretch_unlogged(static_cast<std::size_t>(at[i]), step, count,
                                       [&](std::size_t k) { return value_of(i + k); });
        });
    };
    write(t.v2p, v2p_saved, moved, [&](std::size_t k) { return dst[k]; });
    write(t.p2v, p2v_dst_saved, dst, [&](std::size_t k) { return moved[k]; });
    write(t.p2v, p2v_src_saved, src.data(), [](std::size_t) { return unbound; });
    write(t.page_state, state_dst_saved, dst, [](std::size_t) { return PageState::live; });
    write(t.page_state, state_src_saved, src.data(), [=](std::size_t) { return src_after; });
    // The plan's table writes: for each move the v2p write and the two p2v
    // writes, a list at a time (their rows are distinct, so any order does).
    plan.v2p_value.insert(plan.v2p_value.end(), dst, dst + n);
    plan.p2v_index.insert(plan.p2v_index.end(), dst, dst + n);
    plan.p2v_value.insert(plan.p2v_value.end(), moved, moved + n);
    plan.p2v_index.insert(plan.p2v_index.end(), src.begin(), src.end());
    plan.p2v_value.insert(plan.p2v_value.end(), n, unbound);
    band.counters.pages_moved += static_cast<index_t>(n);
    band.counters.bytes_moved += static_cast<index_t>(n) * band.geometry.page_bytes;
}

void Compaction::free_eager(const Band& band, MoveGate& gate,
                            const std::vector<index_t>& virtual_pages, CompactionRecord* record,
                            const index_t* physical) {
    BandTables& t = band.tables;
    const std::size_t n = virtual_pages.size();
    // The freed pages' physical pages in the order freed (read here unless
    // the caller has), and sorted (a copy only where that order is not).
    std::vector<index_t> read, sorted;
    if (!physical) {
        t.append_physical(virtual_pages.data(), n, read);
        physical = read.data();
    }
    if (!std::is_sorted(physical, physical + n))
        sort_distinct_pages(physical, n, sorted);
    const index_t* const freed = sorted.empty() ? physical : sorted.data();
    const index_t* const freed_end = freed + n;
    const auto k = static_cast<index_t>(n);
    // The band shrinks by k pages at the frontier; survivors of the vacated
    // positions move into the holes the free leaves inside the kept band. The
    // whole compaction is worked out and checked before anything changes.
    const BandDirection dir(band.geometry, t.anchor);
    const auto [vacated_lo, vacated_hi] = dir.frontier_pages(t.watermark, k);
    if (vacated_lo < dir.band_begin(t.watermark) || vacated_hi > dir.band_end(t.watermark))
        band.report.fail(fmt::format("eager compaction of {} freed pages: the band holds only {}",
                                     k, dir.band_end(t.watermark) - dir.band_begin(t.watermark)));
    // freed is sorted: the holes are its pages before and past the vacated
    // positions, and the survivors the live pages of those it does not hold.
    const index_t* const vacated_first = std::lower_bound(freed, freed_end, vacated_lo);
    const index_t* const vacated_last = std::lower_bound(vacated_first, freed_end, vacated_hi);
    std::vector<index_t> holes(freed, vacated_first);
    holes.insert(holes.end(), vacated_last, freed_end);
    std::vector<index_t> survivors(static_cast<std::size_t>(vacated_hi - vacated_lo));
    std::size_t found = 0;
    auto next_freed = vacated_first;
    for (index_t p = vacated_lo; p < vacated_hi; ++p) {
        if (next_freed != vacated_last && *next_freed == p) {
            ++next_freed;
            continue;
        }
        survivors[found] = p;
        found += t.page_state[p] == PageState::live ? 1 : 0;
    }
    survivors.resize(found);
    if (survivors.size() != holes.size())
        band.report.fail(
            fmt::format("eager compaction of {} freed pages found {} survivors for {} holes", k,
                        survivors.size(), holes.size()));
    const std::vector<CompletionTokenPtr> gate_waits =
        gate.eager_free_waits(band.view(), virtual_pages);

    // Every later launch on the instance waits for these transfers: their gates are settled.
    band.plan.waits.insert(band.plan.waits.end(), gate_waits.begin(), gate_waits.end());
    std::optional<std::vector<MoveGate::Gate>> gates_before =
        gate.settle(gate_waits, record != nullptr);
    if (record && gates_before)
        record->gates_before = std::move(gates_before);

    // The forward pass in flight may still read the pages about to move.
    if (latest_forward_done_ && !latest_forward_done_->is_complete())
        band.plan.waits.push_back(latest_forward_done_);
    t.unbind(virtual_pages.data(), physical, n, PageState::outside);
    DevicePlan& plan = band.plan;
    plan.v2p_index.insert(plan.v2p_index.end(), virtual_pages.begin(), virtual_pages.end());
    plan.v2p_value.insert(plan.v2p_value.end(), n, unbound);
    // A hole's p2v entry is rewritten by the move that fills it.
    plan.p2v_index.insert(plan.p2v_index.end(), vacated_first, vacated_last);
    plan.p2v_value.insert(plan.p2v_value.end(),
                          static_cast<std::size_t>(vacated_last - vacated_first), unbound);
    t.live_pages -= k;
    t.watermark = dir.grown(t.watermark, -k);
    // The record is whole before the moves change anything, so that a throw
    // inside them can be undone; the moves then take its virtual pages.
    const index_t* survivors_virtual = nullptr;
    if (record) {
        t.append_virtual(survivors.data(), survivors.size(), record->moved_virtual);
        record->move_src = survivors;
        record->move_dst = holes;
        survivors_virtual = record->moved_virtual.data();
    }
    move_pages(band, survivors, holes.data(), PageState::outside, MoveStart::with_plan,
               survivors_virtual);
    plan.overwrites_freed_pages = plan.overwrites_freed_pages || !survivors.empty();
}

void Compaction::free_lazy(const Band& band, const std::vector<index_t>& virtual_pages,
                           const index_t* physical) {
    BandTables& t = band.tables;
    DevicePlan& plan = band.plan;
    const std::size_t n = virtual_pages.size();
    // The freed pages' physical pages, in the order freed (read here unless
    // the caller has), are the plan's p2v rows and the new holes.
    const std::size_t at = plan.p2v_index.size();
    if (physical)
        plan.p2v_index.insert(plan.p2v_index.end(), physical, physical + n);
    else
        t.append_physical(virtual_pages.data(), n, plan.p2v_index);
    const index_t* const freed = plan.p2v_index.data() + at;
    t.unbind(virtual_pages.data(), freed, n, PageState::hole);
    t.holes.insert_back(freed, freed + n);
    plan.p2v_value.insert(plan.p2v_value.end(), n, unbound);
    plan.v2p_index.insert(plan.v2p_index.end(), virtual_pages.begin(), virtual_pages.end());
    plan.v2p_value.insert(plan.v2p_value.end(), n, unbound);
    t.live_pages -= static_cast<index_t>(n);
    note_holes_peak(band);
}

// ---------------------------------------------------------------- lazy compaction

void Compaction::set_inflight_forward(const Band& band, CompletionTokenPtr token,
                                      const index_t* virtual_tokens, index_t count) {
    std::vector<index_t>& pages = inflight_virtual_pages_.edit();
    pages.clear();
    if (!band.is_lazy() || !token || count <= 0) {
        inflight_forward_done_.reset();
        return;
    }
    for (index_t i = 0; i < count; ++i)
        if (virtual_tokens[i] >= 0)
            pages.push_back(virtual_tokens[i] / band.page_size());
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    inflight_forward_done_ = std::move(token);
}

void Compaction::drain_pending(const Band& band, bool urgent) {
    BandTables& t = band.tables;
    if (pending_.get().empty())
        return;
    std::vector<PendingBatch> still_pending;
    for (auto& batch : pending_.edit()) {
        const bool done = !batch.readers_done || batch.readers_done->is_complete();
        if (!done && !urgent) {
            still_pending.push_back(std::move(batch));
            continue;
        }
        if (!done)
            band.plan.waits.push_back(batch.readers_done);
        for (index_t p : batch.pages) {
            t.page_state.set(p, PageState::hole);
            t.holes.push_back(p);
        }
        pending_pages_ -= static_cast<index_t>(batch.pages.size());
    }
    pending_.edit().swap(still_pending);
    note_holes_peak(band);
}

void Compaction::add_pending(const CompletionTokenPtr& readers_done,
                             const std::vector<index_t>& pages) {
    // One batch per token, as the reference keys them; a later batch of the
    // same token joins it (the reference's replaced the earlier pages, which
    // were then never reused).
    for (auto& batch : pending_.edit())
        if (batch.readers_done == readers_done) {
            batch.pages.insert(batch.pages.end(), pages.begin(), pages.end());
            return;
        }
    pending_.edit().push_back({readers_done, pages});
}

index_t Compaction::flush(const Band& band, MoveGate& gate, bool urgent) {
    BandTables& t = band.tables;
    drain_pending(band, urgent);
    gate.drop_complete();
    if (t.holes.empty())
        return 0;

    const BandDirection dir(band.geometry, t.anchor);
    const std::vector<index_t> gated = gate.gated_pages();
    std::vector<index_t> holes(t.holes.begin(), t.holes.end());
    const auto nearer_anchor = [&](index_t a, index_t b) { return dir.nearer_anchor(a, b); };
    if (!std::is_sorted(holes.begin(), holes.end(), nearer_anchor))
        std::sort(holes.begin(), holes.end(), nearer_anchor);
    const index_t absorbed = absorb_frontier_holes(band, holes, gated);
    // Urgent, with holes left inside the band: it packs the band fully,
    // unless pages under a transfer must stay where they are.
    const bool pack = urgent && !holes.empty() && gated.empty();
    std::vector<index_t> write_set;
    const CompletionTokenPtr readers = settle_forward(band, pack, write_set);
    // A page under a transfer stops the walk as one the forward writes does,
    // and a hole under one is no destination.
    std::vector<index_t> stops;
    std::merge(write_set.begin(), write_set.end(), gated.begin(), gated.end(),
               std::back_inserter(stops));
    std::vector<index_t> targets, kept;
    if (gated.empty()) {
        targets.swap(holes);
    } else {
        for (index_t h : holes)
            (std::binary_search(gated.begin(), gated.end(), h) ? kept : targets).push_back(h);
    }
    const std::vector<index_t> moved_from =
        move_survivors(band, targets, urgent ? -1 : band.options.max_moves_per_flush, stops);

    t.holes.clear();
    if (pack) {
        // Every leftover hole and moved-from page now lies past the new frontier.
        const auto reclaimed = static_cast<index_t>(targets.size() + kept.size());
        const auto [first, last] = dir.frontier_pages(t.watermark, reclaimed);
        t.page_state.fill(static_cast<std::size_t>(first), static_cast<std::size_t>(last),
                          PageState::outside);
        t.watermark = dir.grown(t.watermark, -reclaimed);
        band.counters.pages_absorbed += reclaimed;
    } else {
        // The holes left over in ascending page order (the reference's sorted
        // list), then the moved-from pages in move order.
        std::vector<index_t> remaining(
            targets.begin() + static_cast<std::ptrdiff_t>(moved_from.size()), targets.end());
        remaining.insert(remaining.end(), kept.begin(), kept.end());
        std::sort(remaining.begin(), remaining.end());
        t.holes.assign(remaining.begin(), remaining.end());
        release_moved_from(band, readers, moved_from);
    }
    note_holes_peak(band);
    if (!moved_from.empty() || absorbed > 0)
        ++band.counters.flushes;
    return static_cast<index_t>(moved_from.size());
}

index_t Compaction::absorb_frontier_holes(const Band& band, std::vector<index_t>& holes,
                                          const std::vector<index_t>& gated) {
    BandTables& t = band.tables;
    // Holes that already touch the frontier leave the band without a move;
    // one under a transfer stays (the peer could take it over).
    const BandDirection dir(band.geometry, t.anchor);
    index_t absorbed = 0;
    while (!holes.empty() && holes.back() == dir.frontier_page(t.watermark) &&
           !std::binary_search(gated.begin(), gated.end(), holes.back())) {
        t.page_state.set(holes.back(), PageState::outside);
        holes.pop_back();
        t.watermark = dir.grown(t.watermark, -1);
        ++absorbed;
    }
    band.counters.pages_absorbed += absorbed;
    return absorbed;
}

CompletionTokenPtr Compaction::settle_forward(const Band& band, bool pack,
                                              std::vector<index_t>& write_set) {
    const BandTables& t = band.tables;
    if (pack) {
        // One wait settles both hazards: the forward neither writes nor reads
        // any page any more, so the walk may move every survivor and the
        // moved-from pages are free at once.
        if (latest_forward_done_ && !latest_forward_done_->is_complete())
            band.plan.waits.push_back(latest_forward_done_);
        inflight_forward_done_.reset();
        inflight_virtual_pages_.edit().clear();
        return nullptr;
    }
    if (inflight_forward_done_ && !inflight_forward_done_->is_complete()) {
        for (index_t v : inflight_virtual_pages_.get())
            if (v < t.virtual_table_pages && t.v2p[v] != unbound)
                write_set.push_back(t.v2p[v]);
        std::sort(write_set.begin(), write_set.end());
    } else if (inflight_forward_done_ || !inflight_virtual_pages_.get().empty()) {
        inflight_forward_done_.reset();
        inflight_virtual_pages_.edit().clear();
    }
    return latest_forward_done_;
}

std::vector<index_t> Compaction::move_survivors(const Band& band, const std::vector<index_t>& holes,
                                                index_t cap,
                                                const std::vector<index_t>& write_set) {
    const BandTables& t = band.tables;
    // Two pointers: the survivor nearest the frontier moves into the hole
    // nearest the anchor, until they cross; a page the forward in flight
    // writes stops the walk. The walk takes the pairs first and the moves
    // follow in one batch: a move's destination is a hole the walk has
    // passed over already, so the walk's reads see what they saw before.
    const BandDirection dir(band.geometry, t.anchor);
    std::vector<index_t> moved_from;
    const std::size_t most =
        cap < 0 ? holes.size() : std::min(holes.size(), static_cast<std::size_t>(cap));
    moved_from.reserve(most);
    index_t src = dir.frontier_page(t.watermark);
    while (moved_from.size() < most) {
        while (dir.on_side(src) && t.page_state[src] != PageState::live)
            src = dir.toward_anchor(src);
        if (!dir.on_side(src))
            break;
        const index_t dst = holes[moved_from.size()];
        if (dir.nearer_anchor(src, dst) ||
            (!write_set.empty() && std::binary_search(write_set.begin(), write_set.end(), src)))
            break;
        moved_from.push_back(src);
        src = dir.toward_anchor(src);
    }
    move_pages(band, moved_from, holes.data(), PageState::moved_out, MoveStart::early);
    return moved_from;
}

void Compaction::release_moved_from(const Band& band, const CompletionTokenPtr& readers,
                                    const std::vector<index_t>& moved_from) {
    BandTables& t = band.tables;
    if (moved_from.empty())
        return;
    if (!readers || readers->is_complete()) {
        for (index_t p : moved_from) {
            t.page_state.set(p, PageState::hole);
            t.holes.push_back(p);
        }
        return;
    }
    // A forward still reads the moved-from pages: reuse waits for it.
    for (index_t p : moved_from)
        t.page_state.set(p, PageState::pending);
    pending_pages_ += static_cast<index_t>(moved_from.size());
    add_pending(readers, moved_from);
}

// ---------------------------------------------------------------- band shift

index_t Compaction::shiftable_bytes(const BandView& band, bool from_below, index_t lowest_free,
                                    index_t limit_above) const {
    const BandTables& t = band.tables;
    const index_t far_gap_pages = from_below ? limit_above - t.watermark : t.anchor - lowest_free;
    return (std::max<index_t>(0, far_gap_pages) + static_cast<index_t>(t.holes.size())) *
           band.geometry.page_bytes;
}

bool Compaction::shift_away(const Band& band, const MoveGate& gate, bool from_below, index_t bytes,
                            index_t lowest_free, index_t limit_above) {
    BandTables& t = band.tables;
    const index_t k = ceil_div(bytes, band.geometry.page_bytes);
    // The vacated edge [lo, hi), which may reach past the band.
    const index_t lo = from_below ? t.anchor : t.watermark - k;
    const index_t hi = from_below ? t.anchor + k : t.watermark;
    if (from_below ? hi > limit_above : lo < lowest_free)
        return false;
    const std::vector<index_t> gated = gate.gated_pages();
    const auto is_gated = [&](index_t p) {
        return std::binary_search(gated.begin(), gated.end(), p);
    };
    std::vector<index_t> sources;
    for (index_t p = std::max(lo, t.anchor); p < std::min(hi, t.watermark); ++p) {
        if (is_gated(p))
            return false;
        if (t.page_state[p] == PageState::live)
            sources.push_back(p);
    }
    // Destinations: holes outside the edge, lowest first, then far gap pages.
    std::vector<index_t> holes_sorted(t.holes.begin(), t.holes.end());
    std::sort(holes_sorted.begin(), holes_sorted.end());
    std::vector<index_t> destinations;
    for (index_t h : holes_sorted) {
        if (destinations.size() == sources.size())
            break;
        if ((h < lo || h >= hi) && !is_gated(h))
            destinations.push_back(h);
    }
    const auto fresh = static_cast<index_t>(sources.size() - destinations.size());
    if (from_below) {
        const index_t first = std::max(t.watermark, hi);
        if (first + fresh > limit_above)
            return false;
        for (index_t p = first; p < first + fresh; ++p)
            destinations.push_back(p);
    } else {
        const index_t last = std::min(t.anchor, lo);
        if (last - fresh < lowest_free)
            return false;
        for (index_t p = last - fresh; p < last; ++p)
            destinations.push_back(p);
    }

    // The forward in flight may read or write the pages about to move, or
    // read the ones leaving the band: one wait settles both, as for a pack.
    std::vector<index_t> no_write_set;
    settle_forward(band, true, no_write_set);
    const auto in_edge = [&](index_t p) { return p >= lo && p < hi; };
    // Pages awaiting reuse on the edge leave once their readers are done.
    if (pending_pages_ > 0) {
        std::vector<PendingBatch>& batches = pending_.edit();
        for (PendingBatch& batch : batches) {
            const auto left = std::stable_partition(batch.pages.begin(), batch.pages.end(),
                                                    [&](index_t p) { return !in_edge(p); });
            if (left == batch.pages.end())
                continue;
            if (batch.readers_done && !batch.readers_done->is_complete())
                band.plan.waits.push_back(batch.readers_done);
            for (auto it = left; it != batch.pages.end(); ++it)
                t.page_state.set(*it, PageState::outside);
            pending_pages_ -= static_cast<index_t>(batch.pages.end() - left);
            batch.pages.erase(left, batch.pages.end());
        }
        batches.erase(std::remove_if(batches.begin(), batches.end(),
                                     [](const PendingBatch& b) { return b.pages.empty(); }),
                      batches.end());
    }
    // The hole list keeps its order, less the holes on the edge and those
    // filled (ascending, as taken from the sorted holes).
    const std::vector<index_t> filled(destinations.begin(),
                                      destinations.end() - static_cast<std::ptrdiff_t>(fresh));
    std::vector<index_t> kept;
    for (index_t h : t.holes) {
        if (in_edge(h))
            t.page_state.set(h, PageState::outside);
        else if (!std::binary_search(filled.begin(), filled.end(), h))
            kept.push_back(h);
    }
    if (kept.size() != t.holes.size())
        t.holes.assign(kept.begin(), kept.end());
    move_pages(band, sources, destinations.data(), PageState::outside);
    if (from_below) {
        t.watermark = std::max(t.watermark, hi) + fresh;
        t.anchor = hi;
    } else {
        t.anchor = std::min(t.anchor, lo) - fresh;
        t.watermark = lo;
    }
    ++band.counters.shifts;
    return true;
}

void Compaction::clear() {
    pending_.edit().clear();
    pending_pages_ = 0;
    latest_forward_done_.reset();
    inflight_forward_done_.reset();
    inflight_virtual_pages_.edit().clear();
}

void Compaction::add_to(StateDigest& digest) const {
    const std::vector<PendingBatch>& pending = pending_.get();
    digest.add(pending.size());
    for (const PendingBatch& b : pending) {
        digest.add_bool(b.readers_done != nullptr);
        digest.add_range(b.pages);
    }
    digest.add_signed(pending_pages_);
    digest.add_bool(latest_forward_done_ != nullptr);
    digest.add_bool(inflight_forward_done_ != nullptr);
    digest.add_range(inflight_virtual_pages_.get());
}

} // namespace kvpool::detail
