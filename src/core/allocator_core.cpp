// The allocator core's orchestration: construction, the neighbours, sizes and
// look-ups, and the calls it hands to its parts (move gate, compaction, backup
// window, transaction log). Allocation and free live in allocation.cpp and
// free.cpp.
#include "band_direction.hpp"
#include "core_util.hpp"

#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace kvpool::detail {

index_t pages_needed_for_extend(const index_t* prefix_lens, const index_t* seq_lens, index_t batch,
                                index_t page_size) {
    index_t pages = 0;
    for (index_t i = 0; i < batch; ++i)
        pages += ceil_div(seq_lens[i], page_size) - ceil_div(prefix_lens[i], page_size);
    return pages;
}

AllocatorCore::AllocatorCore(const SubPoolGeometry& geometry, index_t total_bytes,
                             AllocatorOptions options)
    : geometry_(geometry), total_bytes_(total_bytes), options_(options) {
    tables_.virtual_table_pages = geometry.num_virtual_pages;
    tables_.min_virtual_page = geometry.min_page_index;
    if (options_.max_moves_per_flush <= 0)
        throw Error(
            ErrorCode::invalid_argument,
            fmt::format("max_moves_per_flush must be > 0, got {}", options_.max_moves_per_flush));
    constexpr index_t most_pages = std::numeric_limits<mirror_index_t>::max();
    if (geometry.num_virtual_pages > most_pages || geometry.num_physical_pages > most_pages)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: {} virtual and {} physical pages; at most {} each (a larger "
                                "page size makes fewer)",
                                geometry.spec.name, geometry.num_virtual_pages,
                                geometry.num_physical_pages, most_pages));
    clear();
    plan_.clear();
}

Band AllocatorCore::band() {
    return {geometry_, options_, tables_, plan_, counters_, *this};
}

BandView AllocatorCore::view() const {
    return {geometry_, tables_, *this};
}

TransactionScope AllocatorCore::transaction_scope() {
    return {options_,           tables_,        compaction_,       gate_,     backup_,
            free_group_tokens_, in_free_group_, relocations_held_, counters_, plan_};
}

void AllocatorCore::bind_peer(AllocatorCore* peer) {
    // A non-owner takes over its owner's ids in its own pages: with pages
    // `ratio` times smaller than the owner's (an SWA side with a smaller page),
    // owner page v covers its pages [v * ratio, (v + 1) * ratio).
    const index_t ratio =
        peer && peer->page_size() % page_size() == 0 ? peer->page_size() / page_size() : index_t(1);
    // The id range differs when the tables' lengths do, or only their first ids
    // (each side's padding sink in its own pages: the same length, shifted).
    if (!options_.is_id_owner && peer && peer->options_.is_id_owner &&
        (tables_.virtual_table_pages != peer->tables_.virtual_table_pages * ratio ||
         tables_.min_virtual_page != peer->tables_.min_virtual_page * ratio)) {
        if (tables_.live_pages != 0)
            throw Error(
                ErrorCode::invalid_state,
                fmt::format("{}: bind_peer on a non-owner that holds pages", geometry_.spec.name));
        tables_.virtual_table_pages = peer->tables_.virtual_table_pages * ratio;
        tables_.min_virtual_page = peer->tables_.min_virtual_page * ratio;
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
    const BandDirection band(geometry_, tables_.anchor);
    return band.band_end(tables_.watermark) - band.band_begin(tables_.watermark);
}

index_t AllocatorCore::byte_high_frontier() const {
    return BandDirection(geometry_, tables_.anchor).band_end(tables_.watermark) *
           geometry_.page_bytes;
}

index_t AllocatorCore::byte_low_frontier() const {
    return BandDirection(geometry_, tables_.anchor).band_begin(tables_.watermark) *
           geometry_.page_bytes;
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
    return options_.is_id_owner ? static_cast<index_t>(tables_.free_virtual_pages.size())
                                : geometry_.page_capacity() - tables_.live_pages;
}

index_t AllocatorCore::available_pages(index_t extra_below_bytes, index_t extra_above_bytes) const {
    const index_t pb = geometry_.page_bytes;
    const GrowDirection grow = geometry_.grow();
    index_t below = grow == GrowDirection::up ? 0 : (gap_below_bytes() + extra_below_bytes) / pb;
    if (grow == GrowDirection::floating)
        below = std::min(below, tables_.anchor - geometry_.min_page_index);
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
    if (!neighbour->is_lazy() || neighbour->backup_window_open() ||
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
    return tables_.is_bound(virtual_token, page_size());
}

index_t AllocatorCore::physical_page_of(index_t virtual_page) const {
    if (virtual_page < 0 || virtual_page >= tables_.virtual_table_pages)
        throw Error(ErrorCode::out_of_range,
                    fmt::format("{}: virtual page {} outside [0, {})", geometry_.spec.name,
                                virtual_page, tables_.virtual_table_pages));
    return tables_.v2p[virtual_page];
}

index_t AllocatorCore::virtual_page_of(index_t physical_page) const {
    if (physical_page < 0 || physical_page >= geometry_.num_physical_pages)
        throw Error(ErrorCode::out_of_range,
                    fmt::format("{}: physical page {} outside [0, {})", geometry_.spec.name,
                                physical_page, geometry_.num_physical_pages));
    return tables_.p2v[physical_page];
}

index_t AllocatorCore::translate_token(index_t virtual_token) const {
    const index_t physical_page = physical_page_of(virtual_token / page_size());
    return std::max<index_t>(0, physical_page * page_size() + virtual_token % page_size());
}

// ---------------------------------------------------------------- lazy compaction

index_t AllocatorCore::flush(bool urgent) {
    // Relocations inside a backup window could not be undone by restore_state.
    if (!is_lazy() || backup_.is_open() || relocations_held_)
        return 0;
    return compaction_.flush(band(), gate_, urgent);
}

void AllocatorCore::drain_pending_reuse() {
    if (is_lazy())
        compaction_.drain_pending(band(), false);
}

void AllocatorCore::set_latest_forward_done(CompletionTokenPtr token) {
    compaction_.set_latest_forward_done(std::move(token));
}

void AllocatorCore::set_inflight_forward(CompletionTokenPtr token, const index_t* virtual_tokens,
                                         index_t count) {
    compaction_.set_inflight_forward(band(), std::move(token), virtual_tokens, count);
}

// ---------------------------------------------------------------- band shift

index_t AllocatorCore::shiftable_bytes(bool from_below) const {
    if (!is_floating() || backup_.is_open() || !gate_.gated_pages().empty())
        return 0;
    return compaction_.shiftable_bytes(view(), from_below, lowest_free_page(), page_limit_above());
}

bool AllocatorCore::shift_away(bool from_below, index_t bytes) {
    if (bytes <= 0)
        return true;
    if (!is_floating() || backup_.is_open() || relocations_held_)
        return false;
    return compaction_.shift_away(band(), gate_, from_below, bytes, lowest_free_page(),
                                  page_limit_above());
}

// ---------------------------------------------------------------- move gate

void AllocatorCore::gate_transfer(CompletionTokenPtr token, const index_t* virtual_tokens,
                                  index_t count, bool skip_unbound) {
    std::vector<index_t> pages =
        gate_.pages_of(view(), token, virtual_tokens, count, skip_unbound, backup_.is_open());
    gate_.add(std::move(token), std::move(pages));
}

void AllocatorCore::check_gate_transfer(const CompletionTokenPtr& token,
                                        const index_t* virtual_tokens, index_t count,
                                        bool skip_unbound) const {
    gate_.pages_of(view(), token, virtual_tokens, count, skip_unbound, backup_.is_open());
}

std::vector<index_t> AllocatorCore::gated_pages() const {
    return gate_.gated_pages();
}

index_t AllocatorCore::usable_hole_pages() const {
    return gate_.usable_holes(tables_);
}

// ---------------------------------------------------------------- backup / restore

AllocatorSnapshot AllocatorCore::backup_state() {
    return backup_.backup();
}

void AllocatorCore::check_snapshot(const AllocatorSnapshot& snapshot, const char* call) const {
    backup_.check(snapshot, call, geometry_.spec.name, *this);
}

void AllocatorCore::commit_state(const AllocatorSnapshot& snapshot) {
    backup_.commit(band(), snapshot);
}

void AllocatorCore::restore_state(const AllocatorSnapshot& snapshot) {
    backup_.restore(band(), snapshot);
}

// ---------------------------------------------------------------- clear

void AllocatorCore::clear() {
    // Device entries still bound are reset through the plan.
    for (index_t v = 0; v < static_cast<index_t>(tables_.v2p.size()); ++v)
        if (tables_.v2p[v] != unbound && v >= tables_.min_virtual_page) {
            plan_.set_p2v(tables_.v2p[v], unbound);
            plan_.set_v2p(v, unbound);
        }
    const index_t vpages = tables_.virtual_table_pages;
    const index_t ppages = geometry_.num_physical_pages;
    // Row 0 is the padding anchor: virtual page 0 <-> physical page 0 for ever.
    tables_.v2p.assign(static_cast<std::size_t>(vpages), unbound);
    tables_.p2v.assign(static_cast<std::size_t>(ppages), unbound);
    tables_.v2p.set(0, 0);
    tables_.p2v.set(0, 0);
    tables_.page_state.assign(static_cast<std::size_t>(ppages), PageState::outside);
    tables_.anchor = geometry_.start_page;
    if (is_floating())
        tables_.anchor = std::clamp(tables_.anchor, lowest_free_page(),
                                    std::max(lowest_free_page(), page_limit_above()));
    tables_.watermark = BandDirection(geometry_, tables_.anchor).empty_watermark();
    tables_.free_virtual_pages.clear();
    if (options_.is_id_owner)
        tables_.free_virtual_pages.insert_back_run(
            tables_.min_virtual_page,
            static_cast<std::size_t>(std::max<index_t>(0, vpages - tables_.min_virtual_page)));
    tables_.holes.clear();
    compaction_.clear();
    tables_.live_pages = 0;
    gate_.clear();
    in_free_group_ = false;
    free_group_tokens_.clear();
    backup_.clear();
}

// ---------------------------------------------------------------- transactions

void AllocatorCore::open_transaction() {
    transaction_.open(transaction_scope());
}

void AllocatorCore::checkpoint_transaction() {
    transaction_.checkpoint(transaction_scope());
}

void AllocatorCore::close_transaction() {
    transaction_.close(transaction_scope());
}

void AllocatorCore::rollback_transaction() {
    transaction_.rollback(transaction_scope());
}

} // namespace kvpool::detail
