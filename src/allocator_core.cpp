#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace kvpool::detail {

namespace {

index_t ceil_div(index_t a, index_t b) {
    return (a + b - 1) / b;
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
    if (!options_.is_id_owner && peer && peer->options_.is_id_owner &&
        virtual_table_pages_ != peer->virtual_table_pages_) {
        if (live_pages_ != 0)
            throw Error(
                ErrorCode::invalid_state,
                fmt::format("{}: bind_peer on a non-owner that holds pages", geometry_.spec.name));
        virtual_table_pages_ = peer->virtual_table_pages_;
        min_virtual_page_ = peer->min_virtual_page_;
        clear();
        plan_.clear();
    }
    peer_ = peer;
}

// ---------------------------------------------------------------- sizes

index_t AllocatorCore::band_pages() const {
    if (geometry_.grow() == GrowDirection::up)
        return watermark_ - geometry_.min_page_index;
    return geometry_.num_physical_pages - 1 - watermark_;
}

index_t AllocatorCore::byte_high_frontier() const {
    if (geometry_.grow() == GrowDirection::up)
        return watermark_ * geometry_.page_bytes;
    return geometry_.num_physical_pages * geometry_.page_bytes;
}

index_t AllocatorCore::byte_low_frontier() const {
    if (geometry_.grow() == GrowDirection::up)
        return geometry_.min_page_index * geometry_.page_bytes;
    return (watermark_ + 1) * geometry_.page_bytes;
}

index_t AllocatorCore::gap_bytes() const {
    if (geometry_.grow() == GrowDirection::up) {
        const index_t limit = peer_ ? peer_->byte_low_frontier() : total_bytes_;
        return std::max<index_t>(0, limit - byte_high_frontier());
    }
    const index_t limit = peer_ ? peer_->byte_high_frontier() : 0;
    return std::max<index_t>(0, byte_low_frontier() - limit);
}

index_t AllocatorCore::index_headroom_pages() const {
    return geometry_.grow() == GrowDirection::up ? geometry_.num_physical_pages - watermark_
                                                 : watermark_ + 1 - geometry_.min_page_index;
}

index_t AllocatorCore::free_virtual_page_count() const {
    return options_.is_id_owner ? static_cast<index_t>(free_virtual_pages_.size())
                                : geometry_.page_capacity() - live_pages_;
}

index_t AllocatorCore::available_pages(index_t extra_gap_bytes) const {
    const index_t extend =
        std::min(index_headroom_pages(), (gap_bytes() + extra_gap_bytes) / geometry_.page_bytes);
    return std::min(free_virtual_page_count(), extend + hole_pages());
}

index_t AllocatorCore::available_size() const {
    return available_pages(0) * page_size();
}

index_t AllocatorCore::peer_drainable_hole_bytes() const {
    // A peer inside a backup window skips its flushes: its holes stay put.
    if (!peer_ || !peer_->is_lazy() || peer_->open_window_id_ != 0)
        return 0;
    return peer_->hole_pages() * peer_->geometry_.page_bytes;
}

index_t AllocatorCore::schedulable_available_size() const {
    return available_pages(peer_drainable_hole_bytes()) * page_size();
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
    if (num_pages <= available_pages(0))
        return true;
    // Only the peer's compaction releases gap bytes: packing our own band trades
    // a hole for a gap page one for one.
    if (peer_ && peer_->is_lazy()) {
        peer_->flush(true);
        return num_pages <= available_pages(0);
    }
    return false;
}

void AllocatorCore::take_physical(index_t num_pages, std::vector<index_t>& out,
                                  std::size_t& drained) {
    const index_t from_holes = std::min<index_t>(num_pages, hole_pages());
    for (index_t i = 0; i < from_holes; ++i) {
        out.push_back(holes_.front());
        holes_.pop_front();
    }
    drained = static_cast<std::size_t>(from_holes);
    const index_t extend = num_pages - from_holes;
    if (geometry_.grow() == GrowDirection::up) {
        for (index_t p = watermark_; p < watermark_ + extend; ++p)
            out.push_back(p);
        watermark_ += extend;
    } else if (from_holes > 0) {
        // As the reference: after drained holes, a down side's extension runs
        // from the frontier outward (descending); on its own it is ascending.
        for (index_t p = watermark_; p > watermark_ - extend; --p)
            out.push_back(p);
        watermark_ -= extend;
    } else {
        for (index_t p = watermark_ - extend + 1; p <= watermark_; ++p)
            out.push_back(p);
        watermark_ -= extend;
    }
}

void AllocatorCore::bind(const std::vector<index_t>& virtual_pages,
                         const std::vector<index_t>& physical_pages) {
    for (std::size_t i = 0; i < virtual_pages.size(); ++i) {
        v2p_[virtual_pages[i]] = physical_pages[i];
        p2v_[physical_pages[i]] = virtual_pages[i];
        page_state_[physical_pages[i]] = PageState::live;
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
    out.watermark_before = watermark_;
    const auto first = free_virtual_pages_.begin();
    out.virtual_pages.assign(first, first + num_pages);
    free_virtual_pages_.erase(first, first + num_pages);
    take_physical(num_pages, out.physical_pages, out.drained_holes);
    bind(out.virtual_pages, out.physical_pages);
    if (open_window_id_ != 0)
        undo_log_.push_back({out, true});
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
    // Repeats are found by marking each page in v2p as it is checked; the marks
    // are undone before anything else reads the table.
    constexpr index_t seen = unbound - 1;
    index_t checked = 0;
    for (; checked < count; ++checked) {
        const index_t v = virtual_pages[checked];
        if (v < min_virtual_page_ || v >= virtual_table_pages_ || v2p_[v] != unbound)
            bad.push_back(v);
        else
            v2p_[v] = seen;
    }
    for (index_t i = 0; i < checked; ++i) {
        const index_t v = virtual_pages[i];
        if (v >= min_virtual_page_ && v < virtual_table_pages_ && v2p_[v] == seen)
            v2p_[v] = unbound;
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
    out.watermark_before = watermark_;
    out.virtual_pages.assign(virtual_pages, virtual_pages + count);
    take_physical(count, out.physical_pages, out.drained_holes);
    bind(out.virtual_pages, out.physical_pages);
    if (open_window_id_ != 0)
        undo_log_.push_back({out, false});
    return true;
}

void AllocatorCore::undo_allocation(const PageBinding& binding) {
    if (binding.virtual_pages.empty())
        return;
    // An open backup window logged this allocation last: the undo consumes it.
    if (open_window_id_ != 0)
        undo_log_.pop_back();
    undo_binding(binding, options_.is_id_owner);
}

void AllocatorCore::undo_binding(const PageBinding& binding, bool from_free_list) {
    const auto& virtual_pages = binding.virtual_pages;
    const auto& physical_pages = binding.physical_pages;
    const std::size_t drained_holes = binding.drained_holes;
    for (std::size_t i = 0; i < virtual_pages.size(); ++i) {
        const index_t v = virtual_pages[i], p = physical_pages[i];
        v2p_[v] = unbound;
        p2v_[p] = unbound;
        plan_.set_v2p(v, unbound);
        plan_.set_p2v(p, unbound);
        page_state_[p] = i < drained_holes ? PageState::hole : PageState::outside;
    }
    for (std::size_t i = drained_holes; i-- > 0;)
        holes_.push_front(physical_pages[i]);
    if (from_free_list)
        free_virtual_pages_.insert(free_virtual_pages_.begin(), virtual_pages.begin(),
                                   virtual_pages.end());
    watermark_ = binding.watermark_before;
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
    for (index_t i = 0; i < count; ++i) {
        const index_t t = virtual_tokens[i];
        if (t < 0 || t >= token_limit || t / page_size() < min_virtual_page_) {
            outside.push_back(t);
            continue;
        }
        const index_t page = t / page_size();
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
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    return pages;
}

void AllocatorCore::free_tokens(const index_t* virtual_tokens, index_t count, bool skip_unbound) {
    if (in_free_group_) {
        validated_pages(virtual_tokens, count, skip_unbound);
        free_group_tokens_.insert(free_group_tokens_.end(), virtual_tokens, virtual_tokens + count);
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
    const std::vector<index_t> pages = validated_pages(
        free_group_tokens_.data(), static_cast<index_t>(free_group_tokens_.size()), true);
    if (!pages.empty())
        check_free_allowed();
    in_free_group_ = false;
    free_group_tokens_.clear();
    free_pages(pages);
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
    if (is_lazy())
        free_pages_lazy(virtual_pages);
    else
        free_pages_eager(virtual_pages);
    if (options_.is_id_owner)
        free_virtual_pages_.insert(free_virtual_pages_.end(), virtual_pages.begin(),
                                   virtual_pages.end());
    ++counters_.frees;
    counters_.pages_freed += static_cast<index_t>(virtual_pages.size());
}

void AllocatorCore::move_page(index_t src, index_t dst) {
    const index_t v = p2v_[src];
    plan_.move_src.push_back(src);
    plan_.move_dst.push_back(dst);
    v2p_[v] = dst;
    p2v_[dst] = v;
    p2v_[src] = unbound;
    page_state_[dst] = PageState::live;
    plan_.set_v2p(v, dst);
    plan_.set_p2v(dst, v);
    plan_.set_p2v(src, unbound);
    ++counters_.pages_moved;
    counters_.bytes_moved += geometry_.page_bytes;
}

void AllocatorCore::free_pages_eager(const std::vector<index_t>& virtual_pages) {
    std::vector<index_t> freed;
    freed.reserve(virtual_pages.size());
    for (index_t v : virtual_pages)
        freed.push_back(v2p_[v]);
    std::sort(freed.begin(), freed.end());
    const auto k = static_cast<index_t>(freed.size());
    // The band shrinks by k pages at the frontier; survivors of the vacated
    // positions move into the holes the free leaves inside the kept band. The
    // whole compaction is worked out and checked before anything changes.
    const bool up = geometry_.grow() == GrowDirection::up;
    const index_t vacated_lo = up ? watermark_ - k : watermark_ + 1;
    const index_t vacated_hi = vacated_lo + k;
    if (vacated_lo < geometry_.min_page_index || vacated_hi > geometry_.num_physical_pages)
        fail(fmt::format("eager compaction of {} freed pages: the band holds only {}", k,
                         band_pages()));
    std::vector<index_t> holes, survivors;
    for (index_t p : freed)
        if (p < vacated_lo || p >= vacated_hi)
            holes.push_back(p);
    for (index_t p = vacated_lo; p < vacated_hi; ++p)
        if (page_state_[p] == PageState::live && !std::binary_search(freed.begin(), freed.end(), p))
            survivors.push_back(p);
    if (survivors.size() != holes.size())
        fail(fmt::format("eager compaction of {} freed pages found {} survivors for {} holes", k,
                         survivors.size(), holes.size()));

    // The forward pass in flight may still read the pages about to move.
    if (latest_forward_done_ && !latest_forward_done_->is_complete())
        plan_.waits.push_back(latest_forward_done_);
    for (index_t v : virtual_pages) {
        const index_t p = v2p_[v];
        v2p_[v] = unbound;
        p2v_[p] = unbound;
        page_state_[p] = PageState::outside;
        plan_.set_v2p(v, unbound);
        // A hole's p2v entry is rewritten by the move that fills it.
        if (p >= vacated_lo && p < vacated_hi)
            plan_.set_p2v(p, unbound);
    }
    live_pages_ -= k;
    watermark_ += up ? -k : k;
    for (std::size_t i = 0; i < survivors.size(); ++i) {
        move_page(survivors[i], holes[i]);
        page_state_[survivors[i]] = PageState::outside;
    }
}

void AllocatorCore::free_pages_lazy(const std::vector<index_t>& virtual_pages) {
    for (index_t v : virtual_pages) {
        const index_t p = v2p_[v];
        v2p_[v] = unbound;
        p2v_[p] = unbound;
        page_state_[p] = PageState::hole;
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
    inflight_virtual_pages_.clear();
    if (!is_lazy() || !token || count <= 0) {
        inflight_forward_done_.reset();
        return;
    }
    for (index_t i = 0; i < count; ++i)
        if (virtual_tokens[i] >= 0)
            inflight_virtual_pages_.push_back(virtual_tokens[i] / page_size());
    std::sort(inflight_virtual_pages_.begin(), inflight_virtual_pages_.end());
    inflight_virtual_pages_.erase(
        std::unique(inflight_virtual_pages_.begin(), inflight_virtual_pages_.end()),
        inflight_virtual_pages_.end());
    inflight_forward_done_ = std::move(token);
}

void AllocatorCore::drain_pending(bool urgent) {
    std::vector<PendingBatch> still_pending;
    for (auto& batch : pending_) {
        const bool done = !batch.readers_done || batch.readers_done->is_complete();
        if (!done && !urgent) {
            still_pending.push_back(std::move(batch));
            continue;
        }
        if (!done)
            plan_.waits.push_back(batch.readers_done);
        for (index_t p : batch.pages) {
            page_state_[p] = PageState::hole;
            holes_.push_back(p);
        }
        pending_pages_ -= static_cast<index_t>(batch.pages.size());
    }
    pending_.swap(still_pending);
    note_holes_peak();
}

void AllocatorCore::add_pending(const CompletionTokenPtr& readers_done,
                                const std::vector<index_t>& pages) {
    // One batch per token, as the reference keys them; a later batch of the
    // same token joins it (the reference's replaced the earlier pages, which
    // were then never reused).
    for (auto& batch : pending_)
        if (batch.readers_done == readers_done) {
            batch.pages.insert(batch.pages.end(), pages.begin(), pages.end());
            return;
        }
    pending_.push_back({readers_done, pages});
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
    if (holes_.empty())
        return 0;

    std::vector<index_t> holes(holes_.begin(), holes_.end());
    std::sort(holes.begin(), holes.end());
    const bool up = geometry_.grow() == GrowDirection::up;

    // Retire holes that already touch the frontier: no move needed.
    index_t absorbed = 0;
    if (up) {
        while (!holes.empty() && holes.back() == watermark_ - 1) {
            page_state_[holes.back()] = PageState::outside;
            holes.pop_back();
            --watermark_;
            ++absorbed;
        }
    } else {
        std::size_t n = 0;
        while (n < holes.size() && holes[n] == watermark_ + 1) {
            page_state_[holes[n]] = PageState::outside;
            ++n;
            ++watermark_;
        }
        holes.erase(holes.begin(), holes.begin() + static_cast<std::ptrdiff_t>(n));
        absorbed = static_cast<index_t>(n);
    }
    counters_.pages_absorbed += absorbed;

    CompletionTokenPtr readers = latest_forward_done_;
    std::vector<index_t> write_set; // physical pages the in-flight forward writes
    if (urgent && !holes.empty()) {
        // One wait settles both hazards: the forward neither writes nor reads any
        // page any more, so the walk may move every survivor.
        if (readers && !readers->is_complete())
            plan_.waits.push_back(readers);
        readers.reset();
        inflight_forward_done_.reset();
        inflight_virtual_pages_.clear();
    } else if (inflight_forward_done_ && !inflight_forward_done_->is_complete()) {
        for (index_t v : inflight_virtual_pages_)
            if (v < virtual_table_pages_ && v2p_[v] != unbound)
                write_set.push_back(v2p_[v]);
        std::sort(write_set.begin(), write_set.end());
    } else {
        inflight_forward_done_.reset();
        inflight_virtual_pages_.clear();
    }

    // Two pointers: the topmost survivor moves into the deepest hole, until they cross.
    const index_t cap = urgent ? -1 : options_.max_moves_per_flush;
    std::vector<index_t> moved_from;
    std::size_t dst_used = 0;
    index_t src = up ? watermark_ - 1 : watermark_ + 1;
    while (dst_used < holes.size() && (cap < 0 || static_cast<index_t>(moved_from.size()) < cap)) {
        while (up ? src >= geometry_.min_page_index : src < geometry_.num_physical_pages) {
            if (page_state_[src] == PageState::live)
                break;
            src += up ? -1 : 1;
        }
        if (up ? src < geometry_.min_page_index : src >= geometry_.num_physical_pages)
            break;
        const index_t dst = up ? holes[dst_used] : holes[holes.size() - 1 - dst_used];
        if (up ? src < dst : src > dst)
            break;
        if (std::binary_search(write_set.begin(), write_set.end(), src))
            break;
        move_page(src, dst);
        page_state_[src] = PageState::moved_out;
        moved_from.push_back(src);
        ++dst_used;
        src += up ? -1 : 1;
    }

    // The holes left over, in ascending order.
    std::vector<index_t> remaining =
        up ? std::vector<index_t>(holes.begin() + static_cast<std::ptrdiff_t>(dst_used),
                                  holes.end())
           : std::vector<index_t>(holes.begin(),
                                  holes.end() - static_cast<std::ptrdiff_t>(dst_used));
    holes_.clear();
    if (urgent && !holes.empty()) {
        // Fully packed: every leftover hole and moved-from page lies past the new frontier.
        const auto reclaimed = static_cast<index_t>(holes.size());
        if (up) {
            for (index_t p = watermark_ - reclaimed; p < watermark_; ++p)
                page_state_[p] = PageState::outside;
            watermark_ -= reclaimed;
        } else {
            for (index_t p = watermark_ + 1; p <= watermark_ + reclaimed; ++p)
                page_state_[p] = PageState::outside;
            watermark_ += reclaimed;
        }
        counters_.pages_absorbed += reclaimed;
    } else {
        holes_.assign(remaining.begin(), remaining.end());
        if (!moved_from.empty()) {
            if (!readers || readers->is_complete()) {
                for (index_t p : moved_from) {
                    page_state_[p] = PageState::hole;
                    holes_.push_back(p);
                }
            } else {
                // A forward still reads the moved-from pages: reuse waits for it.
                for (index_t p : moved_from)
                    page_state_[p] = PageState::pending;
                pending_pages_ += static_cast<index_t>(moved_from.size());
                add_pending(readers, moved_from);
            }
        }
    }
    note_holes_peak();
    if (!moved_from.empty() || absorbed > 0)
        ++counters_.flushes;
    return static_cast<index_t>(moved_from.size());
}

// ---------------------------------------------------------------- backup / restore

AllocatorSnapshot AllocatorCore::backup_state() {
    const bool opens = open_window_id_ == 0;
    if (opens) {
        open_window_id_ = next_window_id_++;
        undo_log_.clear();
    }
    return {open_window_id_, undo_log_.size(), opens};
}

void AllocatorCore::require_open_window(const AllocatorSnapshot& snapshot, const char* call) const {
    if (snapshot.window_id == 0 || snapshot.window_id != open_window_id_ ||
        snapshot.undo_depth > undo_log_.size())
        throw Error(ErrorCode::invalid_state,
                    fmt::format("{}: {} with a snapshot that is not of the open backup window. "
                                "State: {}",
                                geometry_.spec.name, call, state_string()));
}

void AllocatorCore::commit_state(const AllocatorSnapshot& snapshot) {
    require_open_window(snapshot, "commit_state");
    // An enclosing window still needs the records to undo.
    if (snapshot.opened_window) {
        open_window_id_ = 0;
        undo_log_.clear();
    }
}

void AllocatorCore::restore_state(const AllocatorSnapshot& snapshot) {
    require_open_window(snapshot, "restore_state");
    while (undo_log_.size() > snapshot.undo_depth) {
        const UndoRecord r = std::move(undo_log_.back());
        undo_log_.pop_back();
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
    v2p_[0] = 0;
    p2v_[0] = 0;
    page_state_.assign(static_cast<std::size_t>(ppages), PageState::outside);
    watermark_ = geometry_.grow() == GrowDirection::up ? geometry_.min_page_index
                                                       : geometry_.num_physical_pages - 1;
    free_virtual_pages_.clear();
    if (options_.is_id_owner)
        for (index_t v = min_virtual_page_; v < vpages; ++v)
            free_virtual_pages_.push_back(v);
    holes_.clear();
    pending_.clear();
    pending_pages_ = 0;
    live_pages_ = 0;
    latest_forward_done_.reset();
    inflight_forward_done_.reset();
    inflight_virtual_pages_.clear();
    in_free_group_ = false;
    free_group_tokens_.clear();
    open_window_id_ = 0;
    undo_log_.clear();
}

// ---------------------------------------------------------------- checks

void AllocatorCore::fail(const std::string& what) const {
    throw Error(ErrorCode::internal, fmt::format("{}: invariant broken: {}. State: {}",
                                                 geometry_.spec.name, what, state_string()));
}

void AllocatorCore::check_invariants() const {
    const index_t vpages = virtual_table_pages_;
    const index_t ppages = geometry_.num_physical_pages;
    const index_t min_page = geometry_.min_page_index;
    const index_t min_virtual = min_virtual_page_;
    const bool up = geometry_.grow() == GrowDirection::up;
    if (v2p_[0] != 0 || p2v_[0] != 0)
        fail("the padding anchor 0 <-> 0 is gone");
    const index_t band_lo = up ? min_page : watermark_ + 1;
    const index_t band_hi = up ? watermark_ : ppages;
    if (band_lo < min_page || band_hi > ppages || band_lo > band_hi)
        fail(fmt::format("band [{}, {}) outside [{}, {})", band_lo, band_hi, min_page, ppages));

    index_t live = 0, holes = 0, pending = 0;
    for (index_t p = min_page; p < ppages; ++p) {
        const bool in_band = p >= band_lo && p < band_hi;
        const PageState s = page_state_[p];
        if (!in_band && s != PageState::outside)
            fail(fmt::format("page {} outside the band is not free", p));
        if (in_band && s == PageState::outside)
            fail(fmt::format("page {} inside the band is in no state", p));
        if (s == PageState::moved_out)
            fail(fmt::format("page {} left in the moved-out state", p));
        if (s == PageState::live) {
            ++live;
            const index_t v = p2v_[p];
            if (v < min_virtual || v >= vpages || v2p_[v] != p)
                fail(fmt::format("p2v[{}] = {} is not the inverse of v2p", p, v));
        } else if (p2v_[p] != unbound) {
            fail(fmt::format("page {} is not live but p2v = {}", p, p2v_[p]));
        }
        holes += s == PageState::hole;
        pending += s == PageState::pending;
    }
    if (live != live_pages_)
        fail(fmt::format("{} live pages counted, {} recorded", live, live_pages_));
    if (holes != hole_pages())
        fail(fmt::format("{} holes counted, {} listed", holes, hole_pages()));
    if (pending != pending_pages_)
        fail(fmt::format("{} pending pages counted, {} recorded", pending, pending_pages_));
    for (index_t p : holes_)
        if (page_state_[p] != PageState::hole)
            fail(fmt::format("listed hole {} is not a hole", p));
    for (const auto& batch : pending_)
        for (index_t p : batch.pages)
            if (page_state_[p] != PageState::pending)
                fail(fmt::format("pending page {} is not pending", p));
    if (live + holes + pending != band_pages())
        fail(fmt::format("conservation: live {} + holes {} + pending {} != band {}", live, holes,
                         pending, band_pages()));
    if (!is_lazy() && (holes != 0 || pending != 0))
        fail("eager mode holds holes");

    index_t bound = 0;
    for (index_t v = min_virtual; v < vpages; ++v) {
        if (v2p_[v] == unbound)
            continue;
        ++bound;
        const index_t p = v2p_[v];
        if (p < band_lo || p >= band_hi || page_state_[p] != PageState::live || p2v_[p] != v)
            fail(fmt::format("v2p[{}] = {} is not a live page mapped back", v, p));
    }
    if (bound != live)
        fail(fmt::format("{} virtual pages bound, {} live", bound, live));

    if (options_.is_id_owner) {
        std::vector<char> seen(static_cast<std::size_t>(vpages), 0);
        for (index_t v : free_virtual_pages_) {
            if (v < min_virtual || v >= vpages || v2p_[v] != unbound || seen[v])
                fail(fmt::format("free virtual id {} is bound, repeated or out of range", v));
            seen[v] = 1;
        }
        if (static_cast<index_t>(free_virtual_pages_.size()) + live != geometry_.page_capacity())
            fail(fmt::format("conservation: free ids {} + live {} != capacity {}",
                             free_virtual_pages_.size(), live, geometry_.page_capacity()));
    }
    if (peer_ && gap_bytes() == 0) {
        const bool overlap = up ? byte_high_frontier() > peer_->byte_low_frontier()
                                : peer_->byte_high_frontier() > byte_low_frontier();
        if (overlap)
            fail("the band overlaps the peer's band");
    }
}

std::string AllocatorCore::state_string() const {
    return fmt::format(
        "sub_pool='{}' grow={} mode={} id_owner={} page_size={} pages={} virtual_pages={} "
        "min_page={} watermark={} band={} live={} holes={} pending={} free_ids={} gap_bytes={}",
        geometry_.spec.name, to_string(geometry_.grow()), to_string(options_.mode),
        options_.is_id_owner, page_size(), geometry_.num_physical_pages, virtual_table_pages_,
        geometry_.min_page_index, watermark_, band_pages(), live_pages_, hole_pages(),
        pending_pages_, free_virtual_page_count(), gap_bytes());
}

} // namespace kvpool::detail
