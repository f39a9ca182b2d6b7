#include "band_direction.hpp"

#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <iterator>

namespace kvpool::detail {

namespace {

index_t ceil_div(index_t a, index_t b) {
    return (a + b - 1) / b;
}

// Whether ids[k] == ids[0] + k for every k: an OR of differences, which
// compilers vectorise, where a loop that stops at the first miss is scalar.
bool consecutive(const index_t* ids, std::size_t n) {
    index_t differs = 0;
    for (std::size_t k = 0; k < n; ++k)
        differs |= ids[k] ^ (ids[0] + static_cast<index_t>(k));
    return differs == 0;
}

// At most this many ids are named in an error message.
constexpr std::size_t max_ids_in_message = 8;

std::string first_ids(const std::vector<index_t>& ids) {
    std::vector<index_t> head(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                             ids.size(), max_ids_in_message)));
    return ids.size() > max_ids_in_message
               ? fmt::format("{} (and {} more)", head, ids.size() - max_ids_in_message)
               : fmt::format("{}", head);
}

// Each value once, at its first position.
std::vector<index_t> first_occurrences(std::vector<index_t> values) {
    std::vector<std::size_t> order(values.size());
    for (std::size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
    std::vector<char> repeat(values.size(), 0);
    for (std::size_t k = 1; k < order.size(); ++k)
        repeat[order[k]] = values[order[k]] == values[order[k - 1]];
    std::size_t kept = 0;
    for (std::size_t i = 0; i < values.size(); ++i)
        if (!repeat[i])
            values[kept++] = values[i];
    values.resize(kept);
    return values;
}

} // namespace

index_t pages_needed_for_extend(const index_t* prefix_lens, const index_t* seq_lens, index_t batch,
                                index_t page_size) {
    index_t pages = 0;
    for (index_t i = 0; i < batch; ++i)
        pages += ceil_div(seq_lens[i], page_size) - ceil_div(prefix_lens[i], page_size);
    return pages;
}

index_t pages_needed_for_decode(const index_t* seq_lens, index_t batch, index_t page_size) {
    index_t pages = 0;
    for (index_t i = 0; i < batch; ++i)
        pages += ceil_div(seq_lens[i], page_size) - ceil_div(seq_lens[i] - 1, page_size);
    return pages;
}

AllocatorCore::AllocatorCore(const SideGeometry& geometry, index_t total_bytes,
                             AllocatorOptions options)
    : geometry_(geometry), total_bytes_(total_bytes), options_(options),
      virtual_table_pages_(geometry.num_virtual_pages), min_virtual_page_(geometry.min_page_index) {
    if (options_.max_moves_per_flush <= 0)
        throw Error(
            ErrorCode::invalid_argument,
            fmt::format("max_moves_per_flush must be > 0, got {}", options_.max_moves_per_flush));
    clear();
    plan_.clear();
}

void AllocatorCore::bind_peer(AllocatorCore* peer) {
    // The id range differs when the tables' lengths do, or only their first ids
    // (each side's padding sink in its own pages: the same length, shifted).
    if (!options_.is_id_owner && peer && peer->options_.is_id_owner &&
        (virtual_table_pages_ != peer->virtual_table_pages_ ||
         min_virtual_page_ != peer->min_virtual_page_)) {
        if (live_pages_ != 0)
            throw Error(
                ErrorCode::invalid_state,
                fmt::format("{}: bind_peer on a non-owner that holds pages", geometry_.spec.name));
        virtual_table_pages_ = peer->virtual_table_pages_;
        min_virtual_page_ = peer->min_virtual_page_;
        clear();
        plan_.clear();
    }
    bind_neighbour(peer);
}

void AllocatorCore::bind_neighbour(AllocatorCore* neighbour) {
    if (!neighbour)
        return;
    (neighbour->geometry_.position < geometry_.position ? lower_ : upper_) = neighbour;
}

// ---------------------------------------------------------------- sizes

index_t AllocatorCore::band_pages() const {
    const BandDirection band(geometry_, anchor_);
    return band.band_end(watermark_) - band.band_begin(watermark_);
}

index_t AllocatorCore::byte_high_frontier() const {
    return BandDirection(geometry_, anchor_).band_end(watermark_) * geometry_.page_bytes;
}

index_t AllocatorCore::byte_low_frontier() const {
    return BandDirection(geometry_, anchor_).band_begin(watermark_) * geometry_.page_bytes;
}

index_t AllocatorCore::gap_above_bytes() const {
    const index_t limit = upper_ ? upper_->byte_low_frontier() : total_bytes_;
    return std::max<index_t>(0, limit - byte_high_frontier());
}

index_t AllocatorCore::gap_below_bytes() const {
    const index_t limit = lower_ ? lower_->byte_high_frontier() : 0;
    return std::max<index_t>(0, byte_low_frontier() - limit);
}

// The gap lies above an up side's band, below a down side's, and on both
// sides of a floating one's.
index_t AllocatorCore::gap_bytes() const {
    switch (geometry_.grow()) {
    case GrowDirection::up:
        return gap_above_bytes();
    case GrowDirection::down:
        return gap_below_bytes();
    case GrowDirection::floating:
        break;
    }
    return gap_below_bytes() + gap_above_bytes();
}

index_t AllocatorCore::lowest_free_page() const {
    const index_t limit = lower_ ? ceil_div(lower_->byte_high_frontier(), geometry_.page_bytes) : 0;
    return std::max(limit, geometry_.min_page_index);
}

index_t AllocatorCore::page_limit_above() const {
    const index_t limit =
        upper_ ? upper_->byte_low_frontier() / geometry_.page_bytes : geometry_.num_physical_pages;
    return std::min(limit, geometry_.num_physical_pages);
}

index_t AllocatorCore::index_headroom_pages() const {
    return geometry_.num_physical_pages - geometry_.min_page_index - band_pages();
}

index_t AllocatorCore::free_virtual_page_count() const {
    return options_.is_id_owner ? static_cast<index_t>(free_virtual_pages_.size())
                                : geometry_.page_capacity() - live_pages_;
}

index_t AllocatorCore::available_pages(index_t extra_below_bytes, index_t extra_above_bytes) const {
    const index_t pb = geometry_.page_bytes;
    const GrowDirection grow = geometry_.grow();
    index_t below = grow == GrowDirection::up ? 0 : (gap_below_bytes() + extra_below_bytes) / pb;
    if (grow == GrowDirection::floating)
        below = std::min(below, anchor_ - geometry_.min_page_index);
    const index_t above =
        grow == GrowDirection::down ? 0 : (gap_above_bytes() + extra_above_bytes) / pb;
    const index_t extend = std::min(index_headroom_pages(), below + above);
    return std::min(free_virtual_page_count(), extend + usable_hole_pages());
}

index_t AllocatorCore::available_size() const {
    return available_pages(0, 0) * page_size();
}

index_t AllocatorCore::neighbour_credit_bytes(const AllocatorCore* neighbour) const {
    if (!neighbour)
        return 0;
    if (neighbour->is_floating())
        return neighbour->shiftable_bytes(neighbour == upper_);
    // A peer inside a backup window skips its flushes: its holes stay put.
    // Nor does a peer with pages under a transfer: they may stop its flush.
    if (!neighbour->is_lazy() || neighbour->open_window_id_ != 0 ||
        !neighbour->gated_pages().empty())
        return 0;
    return neighbour->hole_pages() * neighbour->geometry_.page_bytes;
}

index_t AllocatorCore::schedulable_available_size() const {
    return available_pages(neighbour_credit_bytes(lower_), neighbour_credit_bytes(upper_)) *
           page_size();
}

// ---------------------------------------------------------------- look-ups

bool AllocatorCore::is_slot_allocated(index_t virtual_token) const {
    const index_t page = virtual_token / page_size();
    if (virtual_token < 0 || page >= virtual_table_pages_)
        return false;
    return page >= min_virtual_page_ && v2p_[page] != unbound;
}

index_t AllocatorCore::physical_page_of(index_t virtual_page) const {
    if (virtual_page < 0 || virtual_page >= virtual_table_pages_)
        throw Error(ErrorCode::out_of_range,
                    fmt::format("{}: virtual page {} outside [0, {})", geometry_.spec.name,
                                virtual_page, virtual_table_pages_));
    return v2p_[virtual_page];
}

index_t AllocatorCore::virtual_page_of(index_t physical_page) const {
    if (physical_page < 0 || physical_page >= geometry_.num_physical_pages)
        throw Error(ErrorCode::out_of_range,
                    fmt::format("{}: physical page {} outside [0, {})", geometry_.spec.name,
                                physical_page, geometry_.num_physical_pages));
    return p2v_[physical_page];
}

index_t AllocatorCore::translate_token(index_t virtual_token) const {
    const index_t physical_page = physical_page_of(virtual_token / page_size());
    return std::max<index_t>(0, physical_page * page_size() + virtual_token % page_size());
}

// ---------------------------------------------------------------- allocation

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
    std::vector<index_t>& out = binding.physical_pages;
    out.reserve(static_cast<std::size_t>(num_pages));
    const index_t from_holes = std::min<index_t>(num_pages, usable_hole_pages());
    // Holes under a transfer stay where they are in the list; the positions of
    // the holes taken from between them put those back in place on an undo.
    const std::vector<index_t> gated = gated_pages();
    if (gated.empty()) {
        out.insert(out.end(), holes_.begin(), holes_.begin() + from_holes);
        holes_.erase_front(static_cast<std::size_t>(from_holes));
    }
    bool passed_gated = false;
    for (std::size_t i = 0; static_cast<index_t>(out.size()) < from_holes;) {
        if (std::binary_search(gated.begin(), gated.end(), holes_[i])) {
            if (!passed_gated)
                for (std::size_t k = 0; k < out.size(); ++k)
                    binding.hole_positions.push_back(k);
            passed_gated = true;
            ++i;
            continue;
        }
        if (passed_gated)
            binding.hole_positions.push_back(i + out.size());
        out.push_back(holes_[i]);
        holes_.erase_at(i);
    }
    binding.drained_holes = static_cast<std::size_t>(from_holes);
    const index_t extend = num_pages - from_holes;
    if (is_floating()) {
        extend_floating(extend, out);
        return;
    }
    const BandDirection band(geometry_, anchor_);
    watermark_ = band.grown(watermark_, extend);
    const auto [first, last] = band.frontier_pages(watermark_, extend);
    // Ascending, as the reference binds a pure extension on either side and
    // an up side's always; a down side's extension after drained holes it
    // binds from the old frontier outward (descending).
    const std::size_t at = out.size();
    out.resize(at + static_cast<std::size_t>(last - first));
    index_t* const dst = out.data() + at;
    if (!band.up() && from_holes > 0)
        for (index_t k = 0; k < last - first; ++k)
            dst[k] = last - 1 - k;
    else
        for (index_t k = 0; k < last - first; ++k)
            dst[k] = first + k;
}

void AllocatorCore::extend_floating(index_t pages, std::vector<index_t>& out) {
    // Into the wider gap first, then the other: each new page, above the band
    // and below it, ascending.
    const index_t room_above = page_limit_above() - watermark_;
    const index_t room_below = anchor_ - lowest_free_page();
    const bool above_first = room_above >= room_below;
    const index_t above =
        above_first ? std::min(pages, room_above) : pages - std::min(pages, room_below);
    const index_t below = pages - above;
    const auto push_run = [&out](index_t first, index_t count) {
        const std::size_t at = out.size();
        out.resize(at + static_cast<std::size_t>(count));
        for (index_t k = 0; k < count; ++k)
            out[at + static_cast<std::size_t>(k)] = first + k;
    };
    const auto push_above = [&] { push_run(watermark_, above); };
    const auto push_below = [&] { push_run(anchor_ - below, below); };
    if (above_first) {
        push_above();
        push_below();
    } else {
        push_below();
        push_above();
    }
    watermark_ += above;
    anchor_ -= below;
}

void AllocatorCore::bind(const std::vector<index_t>& virtual_pages,
                         const std::vector<index_t>& physical_pages) {
    const std::size_t n = virtual_pages.size();
    const index_t* const v = virtual_pages.data();
    const index_t* const p = physical_pages.data();
    const auto live = [](std::size_t) { return PageState::live; };
    if (n > 0 && consecutive(v, n) && consecutive(p, n)) {
        // One run (a fresh or dense band's): contiguous fills.
        const index_t v0 = v[0], p0 = p[0];
        const auto virtual_at = [v0](std::size_t k) { return static_cast<std::size_t>(v0) + k; };
        const auto physical_at = [p0](std::size_t k) { return static_cast<std::size_t>(p0) + k; };
        v2p_.set_each(n, virtual_at, [p0](std::size_t k) { return p0 + static_cast<index_t>(k); });
        p2v_.set_each(n, physical_at, [v0](std::size_t k) { return v0 + static_cast<index_t>(k); });
        page_state_.set_each(n, physical_at, live);
    } else {
        const auto virtual_at = [v](std::size_t k) { return static_cast<std::size_t>(v[k]); };
        const auto physical_at = [p](std::size_t k) { return static_cast<std::size_t>(p[k]); };
        v2p_.set_each(n, virtual_at, [p](std::size_t k) { return p[k]; });
        p2v_.set_each(n, physical_at, [v](std::size_t k) { return v[k]; });
        page_state_.set_each(n, physical_at, live);
    }
    live_pages_ += static_cast<index_t>(virtual_pages.size());
    counters_.allocs += virtual_pages.empty() ? 0 : 1;
    counters_.pages_allocated += static_cast<index_t>(virtual_pages.size());
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
    const Unjournaled quiet(*this, take_transaction_allocation(out, true));
    out.watermark_before = watermark_;
    out.anchor_before = anchor_;
    const auto first = free_virtual_pages_.begin();
    out.virtual_pages.assign(first, first + num_pages);
    free_virtual_pages_.erase_front(static_cast<std::size_t>(num_pages));
    take_physical(num_pages, out);
    bind(out.virtual_pages, out.physical_pages);
    log_undo(out, true);
    return true;
}

bool AllocatorCore::bind_virtual_pages(const index_t* virtual_pages, index_t count,
                                       PageBinding& out) {
    out.clear();
    if (options_.is_id_owner)
        throw Error(
            ErrorCode::wrong_role,
            fmt::format("{}: alloc_with_virtual on the id owner; use alloc", geometry_.spec.name));
    if (count < 0)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: negative page count {}", geometry_.spec.name, count));
    std::vector<index_t> bad;
    const auto outside_or_bound = [&](index_t v) {
        return v < min_virtual_page_ || v >= virtual_table_pages_ || v2p_[v] != unbound;
    };
    // Ascending ids (a run the peer just minted, the common case) cannot
    // repeat; others are checked for repeats by marking each page in v2p as it
    // is checked, marks undone before anything else reads the table.
    if (std::adjacent_find(virtual_pages, virtual_pages + count,
                           [](index_t a, index_t b) { return a >= b; }) == virtual_pages + count) {
        for (index_t k = 0; k < count; ++k)
            if (outside_or_bound(virtual_pages[k]))
                bad.push_back(virtual_pages[k]);
    } else {
        constexpr index_t seen = unbound - 1;
        index_t checked = 0;
        // The marks undo themselves: a transaction need not journal them.
        const Unjournaled quiet(*this, transaction_open_);
        for (; checked < count; ++checked) {
            const index_t v = virtual_pages[checked];
            if (outside_or_bound(v))
                bad.push_back(v);
            else
                v2p_.set(v, seen);
        }
        for (index_t i = 0; i < checked; ++i) {
            const index_t v = virtual_pages[i];
            if (v >= min_virtual_page_ && v < virtual_table_pages_ && v2p_[v] == seen)
                v2p_.set(v, unbound);
        }
    }
    if (!bad.empty())
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: cannot bind virtual pages {}: outside [{}, {}), already "
                                "bound, or repeated. State: {}",
                                geometry_.spec.name, first_ids(bad), min_virtual_page_,
                                virtual_table_pages_, state_string()));
    if (count == 0)
        return true;
    if (!ensure_room(count)) {
        ++counters_.failed_allocs;
        return false;
    }
    const Unjournaled quiet(*this, take_transaction_allocation(out, false));
    out.watermark_before = watermark_;
    out.anchor_before = anchor_;
    out.virtual_pages.assign(virtual_pages, virtual_pages + count);
    take_physical(count, out);
    bind(out.virtual_pages, out.physical_pages);
    log_undo(out, false);
    return true;
}

void AllocatorCore::undo_allocation(const PageBinding& binding) {
    if (binding.virtual_pages.empty())
        return;
    // The transaction's unjournaled allocation is undone unjournaled too.
    const bool unjournaled = transaction_allocation_.binding == &binding;
    const Unjournaled quiet(*this, unjournaled);
    // An open backup window logged this allocation last: the undo consumes it.
    if (open_window_id_ != 0)
        undo_log_.edit().pop_back();
    undo_binding(binding, options_.is_id_owner);
    if (unjournaled)
        transaction_allocation_ = {};
    // The call answers "no allocation": it counts as one that failed.
    --counters_.allocs;
    counters_.pages_allocated -= static_cast<index_t>(binding.virtual_pages.size());
    ++counters_.failed_allocs;
}

void AllocatorCore::undo_binding(const PageBinding& binding, bool from_free_list) {
    const auto& virtual_pages = binding.virtual_pages;
    const auto& physical_pages = binding.physical_pages;
    const std::size_t drained_holes = binding.drained_holes;
    for (std::size_t i = 0; i < virtual_pages.size(); ++i) {
        const index_t v = virtual_pages[i], p = physical_pages[i];
        v2p_.set(v, unbound);
        p2v_.set(p, unbound);
        plan_.set_v2p(v, unbound);
        plan_.set_p2v(p, unbound);
        page_state_.set(p, i < drained_holes ? PageState::hole : PageState::outside);
    }
    if (binding.hole_positions.empty())
        for (std::size_t i = drained_holes; i-- > 0;)
            holes_.push_front(physical_pages[i]);
    else
        for (std::size_t i = 0; i < drained_holes; ++i)
            holes_.insert_at(binding.hole_positions[i], physical_pages[i]);
    if (from_free_list)
        free_virtual_pages_.insert_front(virtual_pages.begin(), virtual_pages.end());
    watermark_ = binding.watermark_before;
    anchor_ = binding.anchor_before;
    live_pages_ -= static_cast<index_t>(virtual_pages.size());
}

// ---------------------------------------------------------------- free

std::vector<index_t> AllocatorCore::validated_pages(const index_t* virtual_tokens, index_t count,
                                                    bool skip_unbound) const {
    if (count < 0)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: negative id count {}", geometry_.spec.name, count));
    std::vector<index_t> pages;
    pages.reserve(static_cast<std::size_t>(count));
    std::vector<index_t> outside, unallocated;
    const index_t token_limit = virtual_table_pages_ * page_size();
    const index_t ps = page_size();
    const int shift = power_of_two_shift(ps);
    for (index_t i = 0; i < count; ++i) {
        const index_t t = virtual_tokens[i];
        const index_t page = shift >= 0 ? t >> shift : t / ps;
        if (t < 0 || t >= token_limit || page < min_virtual_page_) {
            outside.push_back(t);
            continue;
        }
        if (v2p_[page] == unbound) {
            if (!skip_unbound)
                unallocated.push_back(t);
            continue;
        }
        pages.push_back(page);
    }
    if (!outside.empty())
        throw Error(ErrorCode::out_of_range,
                    fmt::format("{}: free of ids {} outside this side's allocatable ids [{}, "
                                "{}). State: {}",
                                geometry_.spec.name, first_ids(outside),
                                min_virtual_page_ * page_size(), token_limit, state_string()));
    if (!unallocated.empty())
        throw Error(ErrorCode::not_allocated,
                    fmt::format("{}: free of ids {} that are not allocated (double free or "
                                "never allocated). State: {}",
                                geometry_.spec.name, first_ids(unallocated), state_string()));
    // The reference frees a lazy side's page-size-1 ids in the caller's order
    // (its hole list, and every later reuse, follow it) and every other free
    // in ascending page order.
    if (is_lazy() && page_size() == 1)
        return first_occurrences(std::move(pages));
    // A request's pages usually arrive in ascending order already.
    if (!std::is_sorted(pages.begin(), pages.end()))
        std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    return pages;
}

void AllocatorCore::free_tokens(const index_t* virtual_tokens, index_t count, bool skip_unbound) {
    if (in_free_group_) {
        validated_pages(virtual_tokens, count, skip_unbound);
        free_group_tokens_.insert_back(virtual_tokens, virtual_tokens + count);
        return;
    }
    free_pages(validated_pages(virtual_tokens, count, skip_unbound));
}

void AllocatorCore::free_group_begin() {
    in_free_group_ = true;
    free_group_tokens_.clear();
}

void AllocatorCore::free_group_end() {
    if (!in_free_group_)
        return;
    // Tokens of one page may have been queued by several frees of the group.
    const std::vector<index_t> tokens(free_group_tokens_.begin(), free_group_tokens_.end());
    const std::vector<index_t> pages =
        validated_pages(tokens.data(), static_cast<index_t>(tokens.size()), true);
    if (!pages.empty()) {
        check_free_allowed();
        if (!is_lazy())
            eager_free_gate_waits(pages);
    }
    in_free_group_ = false;
    free_group_tokens_.clear();
    free_pages(pages);
}

void AllocatorCore::check_free_tokens(const index_t* virtual_tokens, index_t count,
                                      bool skip_unbound) const {
    const std::vector<index_t> pages = validated_pages(virtual_tokens, count, skip_unbound);
    if (!in_free_group_ && !pages.empty())
        check_free_allowed();
}

void AllocatorCore::check_free_group_end() const {
    if (!in_free_group_)
        return;
    const std::vector<index_t> tokens(free_group_tokens_.begin(), free_group_tokens_.end());
    if (!validated_pages(tokens.data(), static_cast<index_t>(tokens.size()), true).empty())
        check_free_allowed();
}

void AllocatorCore::check_free_allowed() const {
    if (open_window_id_ != 0)
        throw Error(ErrorCode::invalid_state,
                    fmt::format("{}: free inside a backup window (speculative decoding must "
                                "restore or commit first). State: {}",
                                geometry_.spec.name, state_string()));
}

void AllocatorCore::free_pages(const std::vector<index_t>& virtual_pages) {
    if (virtual_pages.empty())
        return;
    check_free_allowed();
    // Inside a transaction the first free goes unjournaled: undo_free takes it back.
    const bool unjournaled = transaction_open_ && !transaction_free_.applied &&
                             transaction_allocation_.binding == nullptr;
    const Unjournaled quiet(*this, unjournaled);
    if (unjournaled) {
        transaction_free_ = {};
        transaction_free_.recording = true;
        transaction_free_.virtual_pages = virtual_pages;
        transaction_free_.physical_pages.reserve(virtual_pages.size());
        for (index_t v : virtual_pages)
            transaction_free_.physical_pages.push_back(v2p_[v]);
    }
    if (is_lazy())
        free_pages_lazy(virtual_pages);
    else
        free_pages_eager(virtual_pages);
    if (options_.is_id_owner)
        free_virtual_pages_.insert_back(virtual_pages.begin(), virtual_pages.end());
    ++counters_.frees;
    counters_.pages_freed += static_cast<index_t>(virtual_pages.size());
    if (unjournaled) {
        transaction_free_.recording = false;
        transaction_free_.applied = true;
    }
}

void AllocatorCore::undo_free(const TransactionFree& f) {
    if (f.gates_before)
        gates_.edit() = *f.gates_before;
    if (options_.is_id_owner)
        free_virtual_pages_.erase_back(f.virtual_pages.size());
    if (is_lazy())
        holes_.erase_back(f.virtual_pages.size());
    for (std::size_t i = f.move_src.size(); i-- > 0;) {
        v2p_.set(f.moved_virtual[i], f.move_src[i]);
        p2v_.set(f.move_src[i], f.moved_virtual[i]);
        page_state_.set(f.move_src[i], PageState::live);
    }
    for (std::size_t i = 0; i < f.virtual_pages.size(); ++i) {
        v2p_.set(f.virtual_pages[i], f.physical_pages[i]);
        p2v_.set(f.physical_pages[i], f.virtual_pages[i]);
        page_state_.set(f.physical_pages[i], PageState::live);
    }
}

void AllocatorCore::move_pages(const std::vector<index_t>& src, const index_t* dst,
                               PageState src_after, MoveStart start) {
    const std::size_t n = src.size();
    if (n == 0)
        return;
    plan_.move_src.insert(plan_.move_src.end(), src.begin(), src.end());
    plan_.move_dst.insert(plan_.move_dst.end(), dst, dst + n);
    if (start == MoveStart::early && move_starter_)
        move_starter_();
    std::vector<index_t> moved(n);
    for (std::size_t k = 0; k < n; ++k)
        moved[k] = p2v_[src[k]];
    // Sources and destinations are disjoint, so every entry is saved before
    // any changes; where one table's entries are too scattered for stretches,
    // each change is logged instead.
    const bool v2p_saved = v2p_.save_stretches(moved.data(), n);
    const bool p2v_src_saved = p2v_.save_stretches(src.data(), n);
    const bool p2v_dst_saved = p2v_.save_stretches(dst, n);
    const bool state_src_saved = page_state_.save_stretches(src.data(), n);
    const bool state_dst_saved = page_state_.save_stretches(dst, n);
    // A loop per table and list, so that each tests its journal choice once.
    const auto write = [n](auto& table, bool saved, const index_t* at, const auto& value_of) {
        for (std::size_t k = 0; k < n; ++k) {
            if (saved)
                table.set_unlogged(static_cast<std::size_t>(at[k]), value_of(k));
            else
                table.set(static_cast<std::size_t>(at[k]), value_of(k));
        }
    };
    write(v2p_, v2p_saved, moved.data(), [&](std::size_t k) { return dst[k]; });
    write(p2v_, p2v_dst_saved, dst, [&](std::size_t k) { return moved[k]; });
    write(p2v_, p2v_src_saved, src.data(), [](std::size_t) { return unbound; });
    write(page_state_, state_dst_saved, dst, [](std::size_t) { return PageState::live; });
    write(page_state_, state_src_saved, src.data(), [=](std::size_t) { return src_after; });
    // The plan's table writes: for each move the v2p write and the two p2v writes.
    const std::size_t p0 = plan_.p2v_index.size();
    plan_.v2p_index.insert(plan_.v2p_index.end(), moved.begin(), moved.end());
    plan_.v2p_value.insert(plan_.v2p_value.end(), dst, dst + n);
    plan_.p2v_index.resize(p0 + 2 * n);
    plan_.p2v_value.resize(p0 + 2 * n);
    index_t* const p2v_index = plan_.p2v_index.data() + p0;
    index_t* const p2v_value = plan_.p2v_value.data() + p0;
    for (std::size_t k = 0; k < n; ++k) {
        p2v_index[2 * k] = dst[k];
        p2v_value[2 * k] = moved[k];
        p2v_index[2 * k + 1] = src[k];
        p2v_value[2 * k + 1] = unbound;
    }
    counters_.pages_moved += static_cast<index_t>(n);
    counters_.bytes_moved += static_cast<index_t>(n) * geometry_.page_bytes;
}

void AllocatorCore::free_pages_eager(const std::vector<index_t>& virtual_pages) {
    std::vector<index_t> freed;
    freed.reserve(virtual_pages.size());
    for (index_t v : virtual_pages)
        freed.push_back(v2p_[v]);
    if (!std::is_sorted(freed.begin(), freed.end()))
        std::sort(freed.begin(), freed.end());
    const auto k = static_cast<index_t>(freed.size());
    // The band shrinks by k pages at the frontier; survivors of the vacated
    // positions move into the holes the free leaves inside the kept band. The
    // whole compaction is worked out and checked before anything changes.
    const BandDirection band(geometry_, anchor_);
    const auto [vacated_lo, vacated_hi] = band.frontier_pages(watermark_, k);
    if (vacated_lo < band.band_begin(watermark_) || vacated_hi > band.band_end(watermark_))
        fail(fmt::format("eager compaction of {} freed pages: the band holds only {}", k,
                         band_pages()));
    std::vector<index_t> holes, survivors;
    for (index_t p : freed)
        if (p < vacated_lo || p >= vacated_hi)
            holes.push_back(p);
    // freed is sorted: one pointer walks it alongside the vacated pages.
    auto next_freed = std::lower_bound(freed.begin(), freed.end(), vacated_lo);
    for (index_t p = vacated_lo; p < vacated_hi; ++p) {
        const bool is_freed = next_freed != freed.end() && *next_freed == p;
        if (is_freed)
            ++next_freed;
        else if (page_state_[p] == PageState::live)
            survivors.push_back(p);
    }
    if (survivors.size() != holes.size())
        fail(fmt::format("eager compaction of {} freed pages found {} survivors for {} holes", k,
                         survivors.size(), holes.size()));
    const std::vector<CompletionTokenPtr> gate_waits = eager_free_gate_waits(virtual_pages);

    // Every later launch on the instance waits for these transfers: their gates are settled.
    plan_.waits.insert(plan_.waits.end(), gate_waits.begin(), gate_waits.end());
    const auto settled = [&](const Gate& g) {
        return g.done->is_complete() ||
               std::find(gate_waits.begin(), gate_waits.end(), g.done) != gate_waits.end();
    };
    if (std::any_of(gates_.get().begin(), gates_.get().end(), settled)) {
        if (transaction_free_.recording)
            transaction_free_.gates_before = gates_.get();
        std::vector<Gate>& gates = gates_.edit();
        gates.erase(std::remove_if(gates.begin(), gates.end(), settled), gates.end());
    }

    // The forward pass in flight may still read the pages about to move.
    if (latest_forward_done_ && !latest_forward_done_->is_complete())
        plan_.waits.push_back(latest_forward_done_);
    for (index_t v : virtual_pages) {
        const index_t p = v2p_[v];
        v2p_.set(v, unbound);
        p2v_.set(p, unbound);
        page_state_.set(p, PageState::outside);
        plan_.set_v2p(v, unbound);
        // A hole's p2v entry is rewritten by the move that fills it.
        if (p >= vacated_lo && p < vacated_hi)
            plan_.set_p2v(p, unbound);
    }
    live_pages_ -= k;
    watermark_ = band.grown(watermark_, -k);
    if (transaction_free_.recording) {
        transaction_free_.moved_virtual.reserve(survivors.size());
        for (index_t p : survivors)
            transaction_free_.moved_virtual.push_back(p2v_[p]);
        transaction_free_.move_src = survivors;
        transaction_free_.move_dst = holes;
    }
    move_pages(survivors, holes.data(), PageState::outside);
    plan_.overwrites_freed_pages = plan_.overwrites_freed_pages || !survivors.empty();
}

void AllocatorCore::free_pages_lazy(const std::vector<index_t>& virtual_pages) {
    for (index_t v : virtual_pages) {
        const index_t p = v2p_[v];
        v2p_.set(v, unbound);
        p2v_.set(p, unbound);
        page_state_.set(p, PageState::hole);
        holes_.push_back(p);
        plan_.set_v2p(v, unbound);
        plan_.set_p2v(p, unbound);
    }
    live_pages_ -= static_cast<index_t>(virtual_pages.size());
    note_holes_peak();
}

void AllocatorCore::note_holes_peak() {
    counters_.holes_peak = std::max(counters_.holes_peak, hole_pages());
}

// ---------------------------------------------------------------- lazy compaction

void AllocatorCore::set_latest_forward_done(CompletionTokenPtr token) {
    latest_forward_done_ = std::move(token);
}

void AllocatorCore::set_inflight_forward(CompletionTokenPtr token, const index_t* virtual_tokens,
                                         index_t count) {
    std::vector<index_t>& pages = inflight_virtual_pages_.edit();
    pages.clear();
    if (!is_lazy() || !token || count <= 0) {
        inflight_forward_done_.reset();
        return;
    }
    for (index_t i = 0; i < count; ++i)
        if (virtual_tokens[i] >= 0)
            pages.push_back(virtual_tokens[i] / page_size());
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    inflight_forward_done_ = std::move(token);
}

void AllocatorCore::drain_pending(bool urgent) {
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
            plan_.waits.push_back(batch.readers_done);
        for (index_t p : batch.pages) {
            page_state_.set(p, PageState::hole);
            holes_.push_back(p);
        }
        pending_pages_ -= static_cast<index_t>(batch.pages.size());
    }
    pending_.edit().swap(still_pending);
    note_holes_peak();
}

void AllocatorCore::add_pending(const CompletionTokenPtr& readers_done,
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

void AllocatorCore::drain_pending_reuse() {
    if (is_lazy())
        drain_pending(false);
}

index_t AllocatorCore::flush(bool urgent) {
    // Relocations inside a backup window could not be undone by restore_state.
    if (!is_lazy() || open_window_id_ != 0 || relocations_held_)
        return 0;
    drain_pending(urgent);
    const auto complete = [](const Gate& g) { return g.done->is_complete(); };
    if (std::any_of(gates_.get().begin(), gates_.get().end(), complete)) {
        std::vector<Gate>& gates = gates_.edit();
        gates.erase(std::remove_if(gates.begin(), gates.end(), complete), gates.end());
    }
    if (holes_.empty())
        return 0;

    const BandDirection band(geometry_, anchor_);
    const std::vector<index_t> gated = gated_pages();
    std::vector<index_t> holes(holes_.begin(), holes_.end());
    const auto nearer_anchor = [&](index_t a, index_t b) { return band.nearer_anchor(a, b); };
    if (!std::is_sorted(holes.begin(), holes.end(), nearer_anchor))
        std::sort(holes.begin(), holes.end(), nearer_anchor);
    const index_t absorbed = absorb_frontier_holes(holes, gated);
    // Urgent, with holes left inside the band: it packs the band fully,
    // unless pages under a transfer must stay where they are.
    const bool pack = urgent && !holes.empty() && gated.empty();
    std::vector<index_t> write_set;
    const CompletionTokenPtr readers = settle_forward(pack, write_set);
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
        move_survivors(targets, urgent ? -1 : options_.max_moves_per_flush, stops);

    holes_.clear();
    if (pack) {
        // Every leftover hole and moved-from page now lies past the new frontier.
        const auto reclaimed = static_cast<index_t>(targets.size() + kept.size());
        const auto [first, last] = band.frontier_pages(watermark_, reclaimed);
        page_state_.fill(static_cast<std::size_t>(first), static_cast<std::size_t>(last),
                         PageState::outside);
        watermark_ = band.grown(watermark_, -reclaimed);
        counters_.pages_absorbed += reclaimed;
    } else {
        // The holes left over in ascending page order (the reference's sorted
        // list), then the moved-from pages in move order.
        std::vector<index_t> remaining(
            targets.begin() + static_cast<std::ptrdiff_t>(moved_from.size()), targets.end());
        remaining.insert(remaining.end(), kept.begin(), kept.end());
        std::sort(remaining.begin(), remaining.end());
        holes_.assign(remaining.begin(), remaining.end());
        release_moved_from(readers, moved_from);
    }
    note_holes_peak();
    if (!moved_from.empty() || absorbed > 0)
        ++counters_.flushes;
    return static_cast<index_t>(moved_from.size());
}

index_t AllocatorCore::absorb_frontier_holes(std::vector<index_t>& holes,
                                             const std::vector<index_t>& gated) {
    // Holes that already touch the frontier leave the band without a move;
    // one under a transfer stays (the peer could take it over).
    const BandDirection band(geometry_, anchor_);
    index_t absorbed = 0;
    while (!holes.empty() && holes.back() == band.frontier_page(watermark_) &&
           !std::binary_search(gated.begin(), gated.end(), holes.back())) {
        page_state_.set(holes.back(), PageState::outside);
        holes.pop_back();
        watermark_ = band.grown(watermark_, -1);
        ++absorbed;
    }
    counters_.pages_absorbed += absorbed;
    return absorbed;
}

CompletionTokenPtr AllocatorCore::settle_forward(bool pack, std::vector<index_t>& write_set) {
    if (pack) {
        // One wait settles both hazards: the forward neither writes nor reads
        // any page any more, so the walk may move every survivor and the
        // moved-from pages are free at once.
        if (latest_forward_done_ && !latest_forward_done_->is_complete())
            plan_.waits.push_back(latest_forward_done_);
        inflight_forward_done_.reset();
        inflight_virtual_pages_.edit().clear();
        return nullptr;
    }
    if (inflight_forward_done_ && !inflight_forward_done_->is_complete()) {
        for (index_t v : inflight_virtual_pages_.get())
            if (v < virtual_table_pages_ && v2p_[v] != unbound)
                write_set.push_back(v2p_[v]);
        std::sort(write_set.begin(), write_set.end());
    } else if (inflight_forward_done_ || !inflight_virtual_pages_.get().empty()) {
        inflight_forward_done_.reset();
        inflight_virtual_pages_.edit().clear();
    }
    return latest_forward_done_;
}

std::vector<index_t> AllocatorCore::move_survivors(const std::vector<index_t>& holes, index_t cap,
                                                   const std::vector<index_t>& write_set) {
    // Two pointers: the survivor nearest the frontier moves into the hole
    // nearest the anchor, until they cross; a page the forward in flight
    // writes stops the walk. The walk takes the pairs first and the moves
    // follow in one batch: a move's destination is a hole the walk has
    // passed over already, so the walk's reads see what they saw before.
    const BandDirection band(geometry_, anchor_);
    std::vector<index_t> moved_from;
    const std::size_t most =
        cap < 0 ? holes.size() : std::min(holes.size(), static_cast<std::size_t>(cap));
    moved_from.reserve(most);
    index_t src = band.frontier_page(watermark_);
    while (moved_from.size() < most) {
        while (band.on_side(src) && page_state_[src] != PageState::live)
            src = band.toward_anchor(src);
        if (!band.on_side(src))
            break;
        const index_t dst = holes[moved_from.size()];
        if (band.nearer_anchor(src, dst) ||
            (!write_set.empty() && std::binary_search(write_set.begin(), write_set.end(), src)))
            break;
        moved_from.push_back(src);
        src = band.toward_anchor(src);
    }
    move_pages(moved_from, holes.data(), PageState::moved_out, MoveStart::early);
    return moved_from;
}

void AllocatorCore::release_moved_from(const CompletionTokenPtr& readers,
                                       const std::vector<index_t>& moved_from) {
    if (moved_from.empty())
        return;
    if (!readers || readers->is_complete()) {
        for (index_t p : moved_from) {
            page_state_.set(p, PageState::hole);
            holes_.push_back(p);
        }
        return;
    }
    // A forward still reads the moved-from pages: reuse waits for it.
    for (index_t p : moved_from)
        page_state_.set(p, PageState::pending);
    pending_pages_ += static_cast<index_t>(moved_from.size());
    add_pending(readers, moved_from);
}

// ---------------------------------------------------------------- band shift

index_t AllocatorCore::shiftable_bytes(bool from_below) const {
    if (!is_floating() || open_window_id_ != 0 || !gated_pages().empty())
        return 0;
    const index_t far_gap_pages =
        from_below ? page_limit_above() - watermark_ : anchor_ - lowest_free_page();
    return (std::max<index_t>(0, far_gap_pages) + hole_pages()) * geometry_.page_bytes;
}

bool AllocatorCore::shift_away(bool from_below, index_t bytes) {
    if (bytes <= 0)
        return true;
    if (!is_floating() || open_window_id_ != 0 || relocations_held_)
        return false;
    const index_t k = ceil_div(bytes, geometry_.page_bytes);
    // The vacated edge [lo, hi), which may reach past the band.
    const index_t lo = from_below ? anchor_ : watermark_ - k;
    const index_t hi = from_below ? anchor_ + k : watermark_;
    if (from_below ? hi > page_limit_above() : lo < lowest_free_page())
        return false;
    const std::vector<index_t> gated = gated_pages();
    const auto is_gated = [&](index_t p) {
        return std::binary_search(gated.begin(), gated.end(), p);
    };
    std::vector<index_t> sources;
    for (index_t p = std::max(lo, anchor_); p < std::min(hi, watermark_); ++p) {
        if (is_gated(p))
            return false;
        if (page_state_[p] == PageState::live)
            sources.push_back(p);
    }
    // Destinations: holes outside the edge, lowest first, then far gap pages.
    std::vector<index_t> holes_sorted(holes_.begin(), holes_.end());
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
        const index_t first = std::max(watermark_, hi);
        if (first + fresh > page_limit_above())
            return false;
        for (index_t p = first; p < first + fresh; ++p)
            destinations.push_back(p);
    } else {
        const index_t last = std::min(anchor_, lo);
        if (last - fresh < lowest_free_page())
            return false;
        for (index_t p = last - fresh; p < last; ++p)
            destinations.push_back(p);
    }

    // The forward in flight may read or write the pages about to move, or
    // read the ones leaving the band: one wait settles both, as for a pack.
    std::vector<index_t> no_write_set;
    settle_forward(true, no_write_set);
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
                plan_.waits.push_back(batch.readers_done);
            for (auto it = left; it != batch.pages.end(); ++it)
                page_state_.set(*it, PageState::outside);
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
    for (index_t h : holes_) {
        if (in_edge(h))
            page_state_.set(h, PageState::outside);
        else if (!std::binary_search(filled.begin(), filled.end(), h))
            kept.push_back(h);
    }
    if (kept.size() != holes_.size())
        holes_.assign(kept.begin(), kept.end());
    move_pages(sources, destinations.data(), PageState::outside);
    if (from_below) {
        watermark_ = std::max(watermark_, hi) + fresh;
        anchor_ = hi;
    } else {
        anchor_ = std::min(anchor_, lo) - fresh;
        watermark_ = lo;
    }
    ++counters_.shifts;
    return true;
}

// ---------------------------------------------------------------- move gate

void AllocatorCore::gate_transfer(CompletionTokenPtr token, const index_t* virtual_tokens,
                                  index_t count, bool skip_unbound) {
    std::vector<index_t> pages = gate_pages_of(token, virtual_tokens, count, skip_unbound);
    if (pages.empty() || token->is_complete())
        return;
    std::vector<Gate>& gates = gates_.edit();
    gates.erase(std::remove_if(gates.begin(), gates.end(),
                               [](const Gate& g) { return g.done->is_complete(); }),
                gates.end());
    gates.push_back({std::move(token), std::move(pages)});
}

void AllocatorCore::check_gate_transfer(const CompletionTokenPtr& token,
                                        const index_t* virtual_tokens, index_t count,
                                        bool skip_unbound) const {
    gate_pages_of(token, virtual_tokens, count, skip_unbound);
}

std::vector<index_t> AllocatorCore::gate_pages_of(const CompletionTokenPtr& token,
                                                  const index_t* virtual_tokens, index_t count,
                                                  bool skip_unbound) const {
    if (!token)
        throw Error(
            ErrorCode::invalid_argument,
            fmt::format("{}: gate_transfer without a completion token", geometry_.spec.name));
    if (open_window_id_ != 0)
        throw Error(ErrorCode::invalid_state,
                    fmt::format("{}: gate_transfer inside a backup window. State: {}",
                                geometry_.spec.name, state_string()));
    if (count < 0)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: negative id count {}", geometry_.spec.name, count));
    std::vector<index_t> pages, unallocated;
    for (index_t i = 0; i < count; ++i) {
        const index_t t = virtual_tokens[i];
        if (is_slot_allocated(t))
            pages.push_back(v2p_[t / page_size()]);
        else if (!skip_unbound)
            unallocated.push_back(t);
    }
    if (!unallocated.empty())
        throw Error(ErrorCode::not_allocated,
                    fmt::format("{}: gate_transfer of ids {} that are not allocated. State: {}",
                                geometry_.spec.name, first_ids(unallocated), state_string()));
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    return pages;
}

void AllocatorCore::check_free_gates(const index_t* virtual_tokens, index_t count) const {
    if (is_lazy() || gates_.get().empty())
        return;
    std::vector<index_t> tokens(virtual_tokens, virtual_tokens + std::max<index_t>(0, count));
    if (in_free_group_)
        tokens.insert(tokens.end(), free_group_tokens_.begin(), free_group_tokens_.end());
    std::vector<index_t> pages;
    for (index_t t : tokens)
        if (is_slot_allocated(t))
            pages.push_back(t / page_size());
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    eager_free_gate_waits(pages);
}

std::vector<CompletionTokenPtr>
AllocatorCore::eager_free_gate_waits(const std::vector<index_t>& virtual_pages) const {
    std::vector<CompletionTokenPtr> waits;
    if (gates_.get().empty() || virtual_pages.empty())
        return waits;
    // The compaction overwrites every freed page (a move's destination, or the
    // gap the peer takes over) and reads every page at the frontier it vacates.
    std::vector<index_t> touched;
    for (index_t v : virtual_pages)
        touched.push_back(v2p_[v]);
    const auto [first, last] =
        BandDirection(geometry_, anchor_)
            .frontier_pages(watermark_, static_cast<index_t>(virtual_pages.size()));
    for (index_t p = std::max(first, geometry_.min_page_index);
         p < std::min(last, geometry_.num_physical_pages); ++p)
        touched.push_back(p);
    std::sort(touched.begin(), touched.end());
    for (const Gate& g : gates_.get()) {
        const bool hit = std::any_of(g.pages.begin(), g.pages.end(), [&](index_t p) {
            return std::binary_search(touched.begin(), touched.end(), p);
        });
        if (!hit || g.done->is_complete())
            continue;
        if (!stream_wait_check_ || !stream_wait_check_(*g.done))
            throw Error(ErrorCode::invalid_state,
                        fmt::format("{}: free would move or overwrite pages {} under a transfer "
                                    "not complete (gate_transfer), and no stream wait can order "
                                    "this eager compaction after it (a host backend, or a token "
                                    "that is not an event of the instance's GPU runtime): "
                                    "complete the transfer first. State: {}",
                                    geometry_.spec.name, first_ids(g.pages), state_string()));
        if (std::find(waits.begin(), waits.end(), g.done) == waits.end())
            waits.push_back(g.done);
    }
    return waits;
}

std::vector<index_t> AllocatorCore::gated_pages() const {
    std::vector<index_t> pages;
    for (const Gate& g : gates_.get())
        if (!g.done->is_complete())
            pages.insert(pages.end(), g.pages.begin(), g.pages.end());
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    return pages;
}

index_t AllocatorCore::usable_hole_pages() const {
    if (gates_.get().empty())
        return hole_pages();
    const std::vector<index_t> gated = gated_pages();
    index_t usable = 0;
    for (index_t p : holes_)
        usable += std::binary_search(gated.begin(), gated.end(), p) ? 0 : 1;
    return usable;
}

// ---------------------------------------------------------------- backup / restore

AllocatorSnapshot AllocatorCore::backup_state() {
    // Window ids are unique in the process: a snapshot of another allocator
    // never matches this one's open window.
    static std::atomic<std::uint64_t> next_window_id{1};
    const bool opens = open_window_id_ == 0;
    if (opens) {
        open_window_id_ = next_window_id.fetch_add(1);
        undo_log_.edit().clear();
    }
    const std::vector<UndoRecord>& log = undo_log_.get();
    return {open_window_id_, log.size(), log.empty() ? 0 : log.back().serial, opens};
}

void AllocatorCore::log_undo(const PageBinding& binding, bool from_free_list) {
    if (open_window_id_ != 0)
        undo_log_.edit().push_back({binding, from_free_list, next_undo_serial_++});
}

void AllocatorCore::check_snapshot(const AllocatorSnapshot& snapshot, const char* call) const {
    const std::size_t depth = snapshot.undo_depth;
    const std::vector<UndoRecord>& log = undo_log_.get();
    const bool valid =
        snapshot.window_id != 0 && snapshot.window_id == open_window_id_ && depth <= log.size() &&
        (depth == 0 ? snapshot.last_record == 0 : log[depth - 1].serial == snapshot.last_record);
    if (!valid)
        throw Error(ErrorCode::invalid_state,
                    fmt::format("{}: {} with a snapshot that is not of the open backup window, "
                                "or that an earlier restore made stale. State: {}",
                                geometry_.spec.name, call, state_string()));
}

void AllocatorCore::commit_state(const AllocatorSnapshot& snapshot) {
    check_snapshot(snapshot, "commit_state");
    // An enclosing window still needs the records to undo.
    if (snapshot.opened_window) {
        open_window_id_ = 0;
        undo_log_.edit().clear();
    }
}

void AllocatorCore::restore_state(const AllocatorSnapshot& snapshot) {
    check_snapshot(snapshot, "restore_state");
    while (undo_log_.get().size() > snapshot.undo_depth) {
        const UndoRecord r = std::move(undo_log_.edit().back());
        undo_log_.edit().pop_back();
        undo_binding(r.binding, r.virtual_pages_from_free_list);
    }
    if (snapshot.opened_window)
        open_window_id_ = 0;
}

// ---------------------------------------------------------------- clear

void AllocatorCore::clear() {
    // Device entries still bound are reset through the plan.
    for (index_t v = 0; v < static_cast<index_t>(v2p_.size()); ++v)
        if (v2p_[v] != unbound && v >= min_virtual_page_) {
            plan_.set_p2v(v2p_[v], unbound);
            plan_.set_v2p(v, unbound);
        }
    const index_t vpages = virtual_table_pages_;
    const index_t ppages = geometry_.num_physical_pages;
    // Row 0 is the padding anchor: virtual page 0 <-> physical page 0 for ever.
    v2p_.assign(static_cast<std::size_t>(vpages), unbound);
    p2v_.assign(static_cast<std::size_t>(ppages), unbound);
    v2p_.set(0, 0);
    p2v_.set(0, 0);
    page_state_.assign(static_cast<std::size_t>(ppages), PageState::outside);
    anchor_ = geometry_.start_page;
    if (is_floating())
        anchor_ = std::clamp(anchor_, lowest_free_page(),
                             std::max(lowest_free_page(), page_limit_above()));
    watermark_ = BandDirection(geometry_, anchor_).empty_watermark();
    std::vector<index_t> free_ids;
    if (options_.is_id_owner)
        for (index_t v = min_virtual_page_; v < vpages; ++v)
            free_ids.push_back(v);
    free_virtual_pages_.assign(free_ids.begin(), free_ids.end());
    holes_.clear();
    pending_.edit().clear();
    pending_pages_ = 0;
    live_pages_ = 0;
    latest_forward_done_.reset();
    inflight_forward_done_.reset();
    inflight_virtual_pages_.edit().clear();
    gates_.edit().clear();
    in_free_group_ = false;
    free_group_tokens_.clear();
    open_window_id_ = 0;
    undo_log_.edit().clear();
}

// ---------------------------------------------------------------- transactions

AllocatorCore::Scalars AllocatorCore::scalars() const {
    return {watermark_,
            anchor_,
            pending_pages_,
            live_pages_,
            latest_forward_done_,
            inflight_forward_done_,
            in_free_group_,
            relocations_held_,
            open_window_id_,
            next_undo_serial_,
            counters_};
}

template <class F> void AllocatorCore::for_each_journal(const F& f) {
    f(free_virtual_pages_);
    f(v2p_);
    f(p2v_);
    f(page_state_);
    f(holes_);
    f(pending_);
    f(inflight_virtual_pages_);
    f(gates_);
    f(free_group_tokens_);
    f(undo_log_);
}

AllocatorCore::Unjournaled::Unjournaled(AllocatorCore& core, bool active)
    : core_(core), active_(active) {
    unsigned bit = 1;
    if (active_)
        core_.for_each_journal([&](auto& j) {
            was_open_ |= j.suspend() ? bit : 0u;
            bit <<= 1;
        });
}

AllocatorCore::Unjournaled::~Unjournaled() {
    if (!active_)
        return;
    unsigned bit = 1;
    core_.for_each_journal([&](auto& j) {
        j.resume((was_open_ & bit) != 0);
        bit <<= 1;
    });
}

bool AllocatorCore::take_transaction_allocation(const PageBinding& binding, bool from_free_list) {
    if (!transaction_open_ || transaction_allocation_.binding != nullptr ||
        transaction_free_.applied)
        return false;
    transaction_allocation_ = {&binding, from_free_list, open_window_id_ != 0};
    return true;
}

void AllocatorCore::open_transaction() {
    for_each_journal([](auto& j) { j.open(); });
    saved_scalars_ = scalars();
    transaction_allocation_ = {};
    transaction_free_.applied = false;
    transaction_open_ = true;
}

void AllocatorCore::checkpoint_transaction() {
    for_each_journal([](auto& j) { j.checkpoint(); });
    saved_scalars_ = scalars();
    transaction_allocation_ = {};
    transaction_free_.applied = false;
}

void AllocatorCore::close_transaction() {
    for_each_journal([](auto& j) { j.close(); });
    saved_scalars_ = {};
    transaction_allocation_ = {};
    transaction_free_.applied = false;
    transaction_open_ = false;
}

void AllocatorCore::rollback_transaction() {
    if (const PageBinding* binding = transaction_allocation_.binding) {
        const Unjournaled quiet(*this, true);
        if (transaction_allocation_.logged_undo)
            undo_log_.edit().pop_back();
        undo_binding(*binding, transaction_allocation_.from_free_list);
        transaction_allocation_ = {};
    }
    if (transaction_free_.applied) {
        const Unjournaled quiet(*this, true);
        undo_free(transaction_free_);
        transaction_free_.applied = false;
    }
    for_each_journal([](auto& j) { j.rollback(); });
    const Scalars& s = saved_scalars_;
    watermark_ = s.watermark;
    anchor_ = s.anchor;
    pending_pages_ = s.pending_pages;
    live_pages_ = s.live_pages;
    latest_forward_done_ = s.latest_forward_done;
    inflight_forward_done_ = s.inflight_forward_done;
    in_free_group_ = s.in_free_group;
    relocations_held_ = s.relocations_held;
    open_window_id_ = s.open_window_id;
    next_undo_serial_ = s.next_undo_serial;
    counters_ = s.counters;
    plan_.clear();
    close_transaction();
}

AllocatorCore::ChangedRows AllocatorCore::changed_rows() const {
    ChangedRows rows;
    rows.all = v2p_.all_changed() || p2v_.all_changed();
    v2p_.for_each_changed([&](std::size_t i) { rows.v2p.push_back(static_cast<index_t>(i)); });
    p2v_.for_each_changed([&](std::size_t i) { rows.p2v.push_back(static_cast<index_t>(i)); });
    if (transaction_free_.applied) {
        const TransactionFree& f = transaction_free_;
        rows.v2p.insert(rows.v2p.end(), f.virtual_pages.begin(), f.virtual_pages.end());
        rows.v2p.insert(rows.v2p.end(), f.moved_virtual.begin(), f.moved_virtual.end());
        rows.p2v.insert(rows.p2v.end(), f.physical_pages.begin(), f.physical_pages.end());
        rows.p2v.insert(rows.p2v.end(), f.move_src.begin(), f.move_src.end());
    }
    if (const PageBinding* binding = transaction_allocation_.binding) {
        rows.v2p.insert(rows.v2p.end(), binding->virtual_pages.begin(),
                        binding->virtual_pages.end());
        rows.p2v.insert(rows.p2v.end(), binding->physical_pages.begin(),
                        binding->physical_pages.end());
    }
    for (auto* r : {&rows.v2p, &rows.p2v}) {
        std::sort(r->begin(), r->end());
        r->erase(std::unique(r->begin(), r->end()), r->end());
    }
    return rows;
}

} // namespace kvpool::detail
