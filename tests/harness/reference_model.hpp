// A host model of SGLang's unified-pool allocator for the differential tests,
// written from the reference (../shared/reference/sglang/multi_ended_allocator.py:
// MultiEndedAllocator, UnifiedSWATokenToKVPoolAllocator,
// UnifiedMambaTokenToKVPoolAllocator), not from src/allocator_core.cpp. It keeps
// the reference's own state (watermark, free physical page list, pending-reuse
// batches keyed by their forward event, free virtual ids, v2p / p2v) and makes
// its decisions step by step: the same size views from the same formulas, the
// same hole order, the same flush walk, the same drain order. Plain containers
// and linear scans; only the geometry (SubPoolGeometry) and the options struct are
// shared with the library.
//
// Where kvpool deliberately differs from the reference (README, "Differences
// from SGLang's reference behaviour"), the model follows kvpool; each such
// place is marked "kvpool:".
//
// kvpool: more than two sides share a buffer (README, "N bands in one
// buffer"): from the low end up one grows up, any number float, one grows
// down, and each side's neighbours are the bands next to it. A floating band
// is an up band over [anchor, watermark) whose anchor moves: it grows into the
// wider of its two gaps first, and shifts away from a neighbour that needs its
// edge (shift_away). The model keeps those rules in the same plain terms.
//
// Completion tokens are the engine's forward-done events. Every wait the
// reference would enqueue on a token that has not completed is recorded
// (take_waits()), so a test can complete those tokens before it replays the
// call on the library (a GPU backend waits for them).
#pragma once

#include <kvpool/completion_token.hpp>
#include <kvpool/detail/allocator_core.hpp>
#include <kvpool/storage/pool_layout.hpp>
#include <kvpool/types.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvpool::test {

class ReferenceSide {
public:
    using Token = CompletionTokenPtr;
    // Moved-from pages waiting for a forward's readers, keyed by its event.
    struct PendingBatch {
        Token event;
        std::vector<index_t> pages;
    };

    ReferenceSide(const SubPoolGeometry& geometry, index_t total_bytes,
                  const AllocatorOptions& options)
        : g_(geometry), total_bytes_(total_bytes), lazy_(options.mode == CompactionMode::lazy),
          max_moves_(options.max_moves_per_flush) {
        p2v_.assign(static_cast<std::size_t>(num_pages()), unbound);
        p2v_[0] = 0; // the padding anchor
        if (floating())
            anchor_ = std::clamp(g_.start_page, g_.min_page_index, num_pages());
        wm_ = up() ? base() : num_pages() - 1;
        // kvpool: a side capped by max_tokens mints ids only below its cap.
        for (index_t v = g_.min_page_index; v < g_.num_virtual_pages; ++v)
            free_ids_.push_back(v);
    }
    // The sides point at each other: not copyable.
    ReferenceSide(const ReferenceSide&) = delete;
    ReferenceSide& operator=(const ReferenceSide&) = delete;

    // Two bands next to each other: the one nearer the low end is the other's
    // lower neighbour.
    void bind_peer(ReferenceSide& peer) {
        ReferenceSide& low = g_.position < peer.g_.position ? *this : peer;
        ReferenceSide& high = &low == this ? peer : *this;
        low.upper_ = &high;
        high.lower_ = &low;
    }
    // While held (the pair's owner until its follower has bound the same
    // ids), the side neither flushes nor shifts.
    void hold_relocations(bool hold) { relocations_held_ = hold; }
    // A non-owner (the SWA side) binds the ids its owner mints; it keeps no
    // free id list.
    // kvpool: a follower of smaller pages takes the owner's ids in its own
    // pages (owner page v is its pages [v * ratio, (v + 1) * ratio)).
    void bind_ids_of(const ReferenceSide& owner) {
        const index_t ratio = owner.page_size() / page_size();
        id_owner_ = false;
        min_virtual_page_ = owner.g_.min_page_index * ratio;
        virtual_pages_ = owner.g_.num_virtual_pages * ratio;
        free_ids_.clear();
    }

    // ------------------------------------------------------------ observation
    // A floating band grows up from its anchor, as an up band from its first page.
    bool up() const { return g_.grow() != GrowDirection::down; }
    bool floating() const { return g_.grow() == GrowDirection::floating; }
    index_t anchor() const { return anchor_; }
    bool lazy() const { return lazy_; }
    index_t page_size() const { return g_.page_size(); }
    index_t num_pages() const { return g_.num_physical_pages; }
    index_t page_bytes() const { return g_.page_bytes; }
    const SubPoolGeometry& geometry() const { return g_; }
    index_t virtual_table_pages() const { return virtual_pages_; }
    const std::map<index_t, index_t>& live() const { return v2p_; }
    index_t live_pages() const { return static_cast<index_t>(v2p_.size()); }
    const std::vector<index_t>& hole_list() const { return free_phys_; }
    index_t hole_count() const { return static_cast<index_t>(free_phys_.size()); }
    const std::vector<PendingBatch>& pending_batches() const { return pending_; }
    index_t pending_pages() const { return static_cast<index_t>(pending_set_.size()); }
    const std::deque<index_t>& free_ids() const { return free_ids_; }
    index_t physical_of_virtual(index_t v) const {
        if (v == 0)
            return 0;
        const auto it = v2p_.find(v);
        return it == v2p_.end() ? unbound : it->second;
    }
    index_t virtual_of_physical(index_t p) const { return p2v_[static_cast<std::size_t>(p)]; }
    // Virtual pages the last successful allocation or binding took, in order.
    const std::vector<index_t>& last_allocated_virtual_pages() const { return last_.virtual_pages; }
    // True when the last allocation attempt on this side flushed a neighbour
    // or shifted one (pages may have moved).
    bool last_alloc_flushed_peer() const { return last_alloc_flushed_peer_; }
    bool window_open() const { return !window_depths_.empty(); }
    std::size_t window_depth() const { return window_depths_.size(); }
    // The waits on unfinished tokens since the last call, emptied.
    std::vector<Token> take_waits() {
        std::vector<Token> out;
        out.swap(waits_);
        return out;
    }

    // ------------------------------------------------------------ sizes (the reference's)
    // _allocated_pages(): the band, holes and pending pages included.
    index_t allocated_pages() const {
        return up() ? std::max<index_t>(0, wm_ - base())
                    : std::max<index_t>(0, num_pages() - 1 - wm_);
    }
    // Lazy counts live pages; eager's band is all live.
    index_t allocated_count() const {
        return (lazy() ? live_page_count_ : allocated_pages()) * page_size();
    }
    index_t byte_high_frontier() const {
        return up() ? wm_ * page_bytes() : num_pages() * page_bytes();
    }
    index_t byte_low_frontier() const {
        return up() ? base() * page_bytes() : (wm_ + 1) * page_bytes();
    }
    index_t gap_above_bytes() const {
        return std::max<index_t>(0, (upper_ ? upper_->byte_low_frontier() : total_bytes_) -
                                        byte_high_frontier());
    }
    index_t gap_below_bytes() const {
        return std::max<index_t>(0,
                                 byte_low_frontier() - (lower_ ? lower_->byte_high_frontier() : 0));
    }
    // An up band's gap lies above it, a down band's below, a floating band's on both sides.
    index_t gap_bytes() const {
        if (floating())
            return gap_below_bytes() + gap_above_bytes();
        return up() ? gap_above_bytes() : gap_below_bytes();
    }
    // pages_by_index_space: own index headroom, not added to by peer bytes.
    index_t index_headroom() const { return num_pages() - g_.min_page_index - allocated_pages(); }
    // kvpool: ids a side can still take (its max_tokens cap; a non-owner's
    // counts its own page capacity).
    index_t free_id_count() const {
        return id_owner_ ? static_cast<index_t>(free_ids_.size())
                         : g_.page_capacity() - live_pages();
    }
    // _available_tokens(extra_gap_bytes), with the extra bytes on either
    // side of the band (kvpool: a floating band extends on both, below its
    // anchor no further than its first page).
    index_t available_tokens(index_t extra_below_bytes, index_t extra_above_bytes) const {
        index_t pages_by_bytes = 0;
        if (!up() || floating()) {
            const index_t below = (gap_below_bytes() + extra_below_bytes) / page_bytes();
            pages_by_bytes += floating() ? std::min(below, anchor_ - g_.min_page_index) : below;
        }
        if (up())
            pages_by_bytes += (gap_above_bytes() + extra_above_bytes) / page_bytes();
        const index_t pages_extend = std::min(pages_by_bytes, index_headroom());
        const index_t pages_drain = lazy() ? hole_count() : 0;
        return std::min(pages_extend + pages_drain, free_id_count()) * page_size();
    }
    index_t available_size() const { return available_tokens(0, 0); }
    // _peer_drainable_hole_bytes(): a neighbour's free list only, not its pages
    // pending reuse, so the credit is realisable. kvpool: a neighbour inside a
    // backup window cannot flush, so it credits nothing; a floating neighbour
    // credits what shifting away from this side frees.
    index_t neighbour_credit_bytes(const ReferenceSide* n) const {
        if (!n)
            return 0;
        if (n->floating())
            return n->shiftable_bytes(n == upper_);
        if (!n->lazy() || n->window_open())
            return 0;
        return n->hole_count() * n->page_bytes();
    }
    index_t schedulable_available_size() const {
        return available_tokens(neighbour_credit_bytes(lower_), neighbour_credit_bytes(upper_));
    }
    // kvpool: the bytes a floating band frees for the neighbour on one side by
    // shifting away from it: its holes and its far gap (none inside a window).
    index_t shiftable_bytes(bool from_below) const {
        if (!floating() || window_open())
            return 0;
        const index_t far_gap =
            from_below ? page_limit_above() - wm_ : anchor_ - lowest_free_page();
        return (std::max<index_t>(0, far_gap) + hole_count()) * page_bytes();
    }

    std::string describe() const {
        std::ostringstream o;
        o << "model{" << g_.spec.name << " grow=" << to_string(g_.grow())
          << " mode=" << (lazy() ? "lazy" : "eager") << " watermark=" << wm_
          << (floating() ? " anchor=" + std::to_string(anchor_) : std::string())
          << " band=" << allocated_pages() << " live=" << live_pages() << " holes=" << hole_count()
          << " pending=" << pending_pages() << " free_ids=" << free_id_count()
          << " gap_bytes=" << gap_bytes() << "}";
        return o.str();
    }

    // ------------------------------------------------------------ allocation
    // alloc(need_size): need_size must be a multiple of the page size.
    std::optional<std::vector<index_t>> alloc(index_t need_tokens) {
        start_alloc();
        if (need_tokens % page_size() != 0)
            throw std::logic_error("model alloc: misaligned size");
        if (need_tokens <= 0)
            return std::vector<index_t>{};
        if (!ensure_room(need_tokens / page_size()))
            return std::nullopt;
        const auto pages = take_ids(need_tokens / page_size());
        if (!alloc_bind(pages, true)) {
            free_ids_.insert(free_ids_.begin(), pages.begin(), pages.end());
            return std::nullopt;
        }
        std::vector<index_t> tokens;
        for (index_t v : pages)
            for (index_t j = 0; j < page_size(); ++j)
                tokens.push_back(v * page_size() + j);
        return tokens;
    }

    // alloc_extend: request r grows from prefix[r] to seq[r] tokens; last_loc[r]
    // is the virtual id of its token at position prefix[r] - 1.
    std::optional<std::vector<index_t>> alloc_extend(const std::vector<index_t>& prefix,
                                                     const std::vector<index_t>& seq,
                                                     const std::vector<index_t>& last_loc) {
        index_t pages = 0;
        for (std::size_t r = 0; r < seq.size(); ++r)
            pages += pages_covering(seq[r]) - pages_covering(prefix[r]);
        const auto fresh = take_request_pages(pages);
        if (!fresh)
            return std::nullopt;
        // alloc_extend_kernel: each request first fills the tail of its last
        // prefix page, then takes whole new pages in order.
        const index_t ps = page_size();
        std::vector<index_t> tokens;
        std::size_t next = 0;
        for (std::size_t r = 0; r < seq.size(); ++r) {
            const index_t prefix_pages = pages_covering(prefix[r]);
            std::vector<index_t> mine;
            for (index_t k = prefix_pages; k < pages_covering(seq[r]); ++k)
                mine.push_back((*fresh)[next++]);
            for (index_t pos = prefix[r]; pos < seq[r]; ++pos)
                tokens.push_back(
                    pos / ps < prefix_pages
                        ? last_loc[r] + (pos - (prefix[r] - 1))
                        : mine[static_cast<std::size_t>(pos / ps - prefix_pages)] * ps + pos % ps);
        }
        return tokens;
    }

    // alloc_decode: one new token per request; seq[r] counts it.
    std::optional<std::vector<index_t>> alloc_decode(const std::vector<index_t>& seq,
                                                     const std::vector<index_t>& last_loc) {
        index_t pages = 0;
        for (index_t s : seq)
            pages += pages_covering(s) - pages_covering(s - 1);
        const auto fresh = take_request_pages(pages);
        if (!fresh)
            return std::nullopt;
        std::vector<index_t> tokens;
        std::size_t next = 0;
        for (std::size_t r = 0; r < seq.size(); ++r)
            tokens.push_back((seq[r] - 1) % page_size() == 0 ? (*fresh)[next++] * page_size()
                                                             : last_loc[r] + 1);
        return tokens;
    }

    // alloc_with_virtual on a non-owner. kvpool: it makes room as an owner
    // does and answers false instead of asserting (in a pair, its owner is
    // held meanwhile, so the owner's flush moves nothing).
    bool bind_virtual(const std::vector<index_t>& virtual_pages) {
        start_alloc();
        if (id_owner_)
            throw std::logic_error("model bind_virtual: on the id owner");
        const auto n = static_cast<index_t>(virtual_pages.size());
        if (n == 0)
            return true;
        if (!ensure_room(n))
            return false;
        return alloc_bind(virtual_pages, false);
    }

    // kvpool: takes back the last allocation (an SWA pair's follower could
    // not bind it), as restore_state() takes back each one.
    void undo_last_allocation() {
        if (window_open())
            undo_log_.pop_back();
        undo(last_);
        last_ = {};
    }

    // ------------------------------------------------------------ free
    // free(free_index): the test never frees an unallocated id.
    void free(const std::vector<index_t>& tokens) {
        if (tokens.empty())
            return;
        if (in_group_) {
            group_.insert(group_.end(), tokens.begin(), tokens.end());
            return;
        }
        free_pages(pages_of(tokens));
    }
    // Tokens whose page is not bound here are skipped (the SWA side's pages
    // released earlier by free_swa: the reference's `v2p > 0` filter).
    void free_if_bound(const std::vector<index_t>& tokens) { free(bound_only(tokens)); }
    void free_group_begin() {
        in_group_ = true;
        group_.clear();
    }
    // kvpool: a page several frees of the group named is freed once.
    void free_group_end() {
        in_group_ = false;
        std::vector<index_t> merged;
        merged.swap(group_);
        free_pages(pages_of(bound_only(merged)));
    }

    // ------------------------------------------------------------ lazy compaction
    void set_latest_forward_done(Token event) { latest_event_ = std::move(event); }
    void set_inflight_forward(Token event, const std::vector<index_t>& virtual_tokens) {
        if (!lazy())
            return;
        inflight_event_ = virtual_tokens.empty() ? nullptr : std::move(event);
        inflight_tokens_ = inflight_event_ ? virtual_tokens : std::vector<index_t>{};
    }
    void drain_pending_reuse() {
        if (lazy() && !pending_.empty())
            drain_pending(false);
    }
    index_t flush_opportunistic() {
        if (!lazy() || (free_phys_.empty() && pending_.empty()))
            return 0;
        return flush(false);
    }

    // _flush(urgent): one compaction pass; returns the pages moved.
    index_t flush(bool urgent) {
        if (!lazy())
            return 0;
        // kvpool: relocations inside a backup window could not be undone.
        if (window_open() || relocations_held_)
            return 0;
        drain_pending(urgent);
        std::sort(free_phys_.begin(), free_phys_.end());
        const std::vector<index_t> holes = absorb_boundary_holes(); // == free_phys_ now

        Token latest = latest_event_;
        // Urgent: one wait on the latest forward settles both hazards, so the
        // walk may move every survivor and the band packs fully.
        const bool single_pass_absorb = urgent && !holes.empty();
        std::optional<std::set<index_t>> write_set;
        if (single_pass_absorb) {
            wait_for(latest_event_);
            inflight_event_ = nullptr;
            latest = nullptr;
            write_set = std::set<index_t>{};
        }

        std::vector<index_t> srcs, dsts, released;
        std::optional<index_t> cursor;
        std::size_t dst_cursor = up() ? 0 : holes.size() - 1;
        std::size_t consumed = 0;
        index_t moves = 0;
        while (consumed < holes.size()) {
            const auto src = topmost_survivor(cursor, holes);
            if (!src)
                break;
            if (!write_set)
                write_set = inflight_write_set();
            if (write_set->count(*src) != 0) {
                if (!urgent)
                    break; // the top blocker stops an opportunistic walk
                moves += commit_moves(srcs, dsts, latest, released);
                wait_for(inflight_event_);
                inflight_event_ = nullptr;
                write_set = std::set<index_t>{};
                latest = nullptr;
                continue;
            }
            const index_t dst = holes[dst_cursor];
            if (up() ? *src < dst : *src > dst)
                break; // the pointers crossed: packed
            dst_cursor = up() ? dst_cursor + 1 : dst_cursor - 1;
            ++consumed;
            if (p2v_[static_cast<std::size_t>(*src)] < 0)
                throw std::logic_error("model flush: a survivor has no virtual page");
            srcs.push_back(*src);
            dsts.push_back(dst);
            cursor = up() ? *src - 1 : *src + 1;
            if (!urgent && static_cast<index_t>(srcs.size()) >= max_moves_)
                break;
        }
        moves += commit_moves(srcs, dsts, latest, released);

        if (single_pass_absorb) {
            // Full pack: every interior hole now lies past the frontier.
            wm_ += up() ? -static_cast<index_t>(holes.size()) : static_cast<index_t>(holes.size());
            free_phys_.clear();
        } else {
            if (up())
                free_phys_.erase(free_phys_.begin(),
                                 free_phys_.begin() + static_cast<std::ptrdiff_t>(consumed));
            else
                free_phys_.resize(free_phys_.size() - consumed);
            free_phys_.insert(free_phys_.end(), released.begin(), released.end());
        }
        return moves;
    }

    // ------------------------------------------------------------ band shift (kvpool)
    // A floating band frees `bytes` at its lower edge (from_below) or upper
    // edge for the neighbour there: the live pages on the vacated edge move,
    // ascending, into the band's holes off the edge (lowest first), then into
    // fresh pages of its far gap (ascending); the holes and the pages pending
    // reuse on the edge leave the band. All or nothing; nothing moves inside
    // a backup window or while held.
    bool shift_away(bool from_below, index_t bytes) {
        if (bytes <= 0)
            return true;
        if (!floating() || window_open() || relocations_held_)
            return false;
        const index_t k = (bytes + page_bytes() - 1) / page_bytes();
        const index_t lo = from_below ? anchor_ : wm_ - k;
        const index_t hi = from_below ? anchor_ + k : wm_;
        if (from_below ? hi > page_limit_above() : lo < lowest_free_page())
            return false;
        const auto on_edge = [&](index_t p) { return p >= lo && p < hi; };
        std::vector<index_t> sources;
        for (index_t p = std::max(lo, anchor_); p < std::min(hi, wm_); ++p)
            if (p2v_[static_cast<std::size_t>(p)] != unbound)
                sources.push_back(p);
        std::vector<index_t> sorted_holes = free_phys_, destinations;
        std::sort(sorted_holes.begin(), sorted_holes.end());
        for (index_t h : sorted_holes)
            if (destinations.size() < sources.size() && !on_edge(h))
                destinations.push_back(h);
        const std::set<index_t> filled(destinations.begin(), destinations.end());
        const auto fresh = static_cast<index_t>(sources.size() - destinations.size());
        const index_t first_fresh = from_below ? std::max(wm_, hi) : std::min(anchor_, lo) - fresh;
        if (from_below ? first_fresh + fresh > page_limit_above()
                       : first_fresh < lowest_free_page())
            return false;
        for (index_t p = first_fresh; p < first_fresh + fresh; ++p)
            destinations.push_back(p);

        // One wait for the forward: it neither reads nor writes a page any more.
        wait_for(latest_event_);
        inflight_event_ = nullptr;
        inflight_tokens_.clear();
        for (auto& batch : pending_) {
            std::vector<index_t> kept;
            bool left = false;
            for (index_t p : batch.pages) {
                if (on_edge(p)) {
                    pending_set_.erase(p);
                    left = true;
                } else {
                    kept.push_back(p);
                }
            }
            if (left)
                wait_for(batch.event);
            batch.pages.swap(kept);
        }
        pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                      [](const PendingBatch& b) { return b.pages.empty(); }),
                       pending_.end());
        std::vector<index_t> holes_kept;
        for (index_t h : free_phys_)
            if (!on_edge(h) && filled.count(h) == 0)
                holes_kept.push_back(h);
        free_phys_.swap(holes_kept);
        for (std::size_t i = 0; i < sources.size(); ++i) {
            const index_t v = p2v_[static_cast<std::size_t>(sources[i])];
            v2p_[v] = destinations[i];
            p2v_[static_cast<std::size_t>(destinations[i])] = v;
            p2v_[static_cast<std::size_t>(sources[i])] = unbound;
        }
        if (from_below) {
            wm_ = std::max(wm_, hi) + fresh;
            anchor_ = hi;
        } else {
            anchor_ = std::min(anchor_, lo) - fresh;
            wm_ = lo;
        }
        return true;
    }

    // ------------------------------------------------------------ backup windows (kvpool)
    // restore() undoes every allocation since the innermost backup(); commit()
    // keeps them (an enclosing window may still undo them).
    void backup() { window_depths_.push_back(undo_log_.size()); }
    void restore() {
        if (!window_open())
            throw std::logic_error("model restore: no window open");
        while (undo_log_.size() > window_depths_.back()) {
            undo(undo_log_.back());
            undo_log_.pop_back();
        }
        window_depths_.pop_back();
    }
    void commit() {
        if (!window_open())
            throw std::logic_error("model commit: no window open");
        window_depths_.pop_back();
        if (window_depths_.empty())
            undo_log_.clear();
    }

private:
    struct Allocation {
        std::vector<index_t> virtual_pages;
        std::vector<index_t> physical_pages;
        std::size_t drained = 0; // physical_pages[0, drained) came from the free list
        index_t watermark_before = 0;
        index_t anchor_before = 0;
        bool ids_from_free_list = false;
    };

    index_t pages_covering(index_t tokens) const {
        return (tokens + page_size() - 1) / page_size();
    }

    // An up band's first page: a floating band's anchor.
    index_t base() const { return floating() ? anchor_ : g_.min_page_index; }
    // The lowest page the lower neighbour leaves free, and the end of the
    // pages below the upper neighbour's band.
    index_t lowest_free_page() const {
        const index_t high = lower_ ? lower_->byte_high_frontier() : 0;
        return std::max((high + page_bytes() - 1) / page_bytes(), g_.min_page_index);
    }
    index_t page_limit_above() const {
        return std::min(upper_ ? upper_->byte_low_frontier() / page_bytes() : num_pages(),
                        num_pages());
    }

    void start_alloc() {
        last_alloc_flushed_peer_ = false;
        last_ = {};
    }

    std::vector<index_t> take_ids(index_t n) {
        std::vector<index_t> pages(free_ids_.begin(), free_ids_.begin() + n);
        free_ids_.erase(free_ids_.begin(), free_ids_.begin() + n);
        return pages;
    }

    // alloc_extend / alloc_decode: too few free ids fails before any flush;
    // then the shortfall flushes the peer, then the pages are bound.
    std::optional<std::vector<index_t>> take_request_pages(index_t pages) {
        start_alloc();
        if (pages > free_id_count())
            return std::nullopt;
        if (!ensure_room(pages))
            return std::nullopt;
        if (pages == 0)
            return std::vector<index_t>{};
        const auto fresh = take_ids(pages);
        if (!alloc_bind(fresh, true)) {
            free_ids_.insert(free_ids_.begin(), fresh.begin(), fresh.end());
            return std::nullopt;
        }
        return fresh;
    }

    // _flush_peer_for_alloc: short of room, one urgent flush of the peer;
    // only the peer's compaction opens gap. kvpool: whenever the peer is lazy
    // (the reference asks whether this side is); a floating neighbour then
    // shifts away by the pages still short, unless ids or index space are
    // what is short.
    bool ensure_room(index_t pages) {
        if (pages * page_size() <= available_size())
            return true;
        for (ReferenceSide* n : {lower_, upper_})
            if (n && !n->floating() && n->lazy()) {
                n->flush(true);
                last_alloc_flushed_peer_ = true;
            }
        if (pages > free_id_count() || pages > index_headroom() + (lazy() ? hole_count() : 0))
            return false;
        // Between two floating bands, when the lower one cannot shift by all
        // that is short, it shifts by what it credits and the upper one by the rest.
        const bool both_float = lower_ && lower_->floating() && upper_ && upper_->floating();
        for (ReferenceSide* n : {lower_, upper_}) {
            const index_t short_pages = pages - available_size() / page_size();
            const bool above = n == upper_;
            // A band takes bytes only on its growing side.
            if (!n || !n->floating() || short_pages <= 0 || (above && !up()) ||
                (!above && up() && !floating()))
                continue;
            const index_t gap = above ? gap_above_bytes() : gap_below_bytes();
            const auto shift = [&](index_t by_pages) {
                const bool moved =
                    n->shift_away(above, (gap / page_bytes() + by_pages) * page_bytes() - gap);
                last_alloc_flushed_peer_ = last_alloc_flushed_peer_ || moved;
                return moved;
            };
            if (shift(short_pages) || above || !both_float)
                continue;
            const index_t credited =
                (available_tokens(neighbour_credit_bytes(n), 0) - available_size()) / page_size();
            if (credited > 0)
                shift(std::min(short_pages, credited));
        }
        return pages * page_size() <= available_size();
    }

    // _alloc_bind_fast_or_slow: without holes (or eager) the watermark extends
    // and the new range binds ascending; with holes, take_physical.
    bool alloc_bind(const std::vector<index_t>& virtual_pages, bool ids_from_free_list) {
        const auto n = static_cast<index_t>(virtual_pages.size());
        Allocation a;
        a.virtual_pages = virtual_pages;
        a.watermark_before = wm_;
        a.anchor_before = anchor_;
        a.ids_from_free_list = ids_from_free_list && id_owner_;
        if (floating() && (!lazy() || free_phys_.empty())) {
            if (!extend_floating(n, a.physical_pages))
                return false;
            if (lazy())
                live_page_count_ += n;
        } else if (!lazy() || free_phys_.empty()) {
            const index_t start = wm_;
            if (!extend_watermark(n))
                return false;
            const index_t first = up() ? start : start - n + 1;
            for (index_t i = 0; i < n; ++i)
                a.physical_pages.push_back(first + i);
            if (lazy())
                live_page_count_ += n;
        } else {
            if (!take_physical(n, a))
                return false;
        }
        for (index_t i = 0; i < n; ++i) {
            const index_t v = a.virtual_pages[static_cast<std::size_t>(i)];
            const index_t p = a.physical_pages[static_cast<std::size_t>(i)];
            if (p2v_[static_cast<std::size_t>(p)] != unbound)
                throw std::logic_error("model alloc: physical page " + std::to_string(p) +
                                       " is in use");
            v2p_[v] = p;
            p2v_[static_cast<std::size_t>(p)] = v;
        }
        last_ = a;
        if (window_open())
            undo_log_.push_back(a);
        return true;
    }

    // _extend_watermark: index space and the peer's frontier.
    bool extend_watermark(index_t n) {
        const index_t new_wm = up() ? wm_ + n : wm_ - n;
        if (up() ? new_wm > num_pages() : new_wm < g_.min_page_index - 1)
            return false;
        if (lazy()) {
            if (up() && upper_ && new_wm * page_bytes() > upper_->byte_low_frontier())
                return false;
            if (!up() && lower_ && (new_wm + 1) * page_bytes() < lower_->byte_high_frontier())
                return false;
        }
        wm_ = new_wm;
        return true;
    }

    // kvpool: a floating band's new pages, into the wider gap first (above
    // on a tie), then the other; each part ascending.
    bool extend_floating(index_t n, std::vector<index_t>& out) {
        const index_t room_above = page_limit_above() - wm_;
        const index_t room_below = anchor_ - lowest_free_page();
        if (n > std::max<index_t>(0, room_above) + std::max<index_t>(0, room_below))
            return false;
        const bool above_first = room_above >= room_below;
        const index_t above = above_first ? std::min(n, room_above) : n - std::min(n, room_below);
        const index_t below = n - above;
        std::vector<index_t> up_pages, down_pages;
        for (index_t p = wm_; p < wm_ + above; ++p)
            up_pages.push_back(p);
        for (index_t p = anchor_ - below; p < anchor_; ++p)
            down_pages.push_back(p);
        const auto& first = above_first ? up_pages : down_pages;
        const auto& second = above_first ? down_pages : up_pages;
        out.insert(out.end(), first.begin(), first.end());
        out.insert(out.end(), second.begin(), second.end());
        wm_ += above;
        anchor_ -= below;
        return true;
    }

    // take_physical (lazy): extend first (nothing changes on failure), then
    // drain the free list from its front; drained pages come first, then the
    // extension: ascending on an up side, descending from the frontier on a
    // down side (a pure extension binds ascending on both).
    bool take_physical(index_t n, Allocation& a) {
        const index_t n_drain = std::min(n, hole_count());
        const index_t need_more = n - n_drain;
        std::vector<index_t> floating_pages;
        if (need_more > 0 && !(floating() ? extend_floating(need_more, floating_pages)
                                          : extend_watermark(need_more)))
            return false;
        a.physical_pages.assign(free_phys_.begin(), free_phys_.begin() + n_drain);
        free_phys_.erase(free_phys_.begin(), free_phys_.begin() + n_drain);
        a.drained = static_cast<std::size_t>(n_drain);
        live_page_count_ += n;
        if (floating())
            a.physical_pages.insert(a.physical_pages.end(), floating_pages.begin(),
                                    floating_pages.end());
        else if (up())
            for (index_t p = wm_ - need_more; p < wm_; ++p)
                a.physical_pages.push_back(p);
        else
            for (index_t p = wm_ + need_more; p > wm_; --p)
                a.physical_pages.push_back(p);
        return true;
    }

    void undo(const Allocation& a) {
        for (std::size_t i = 0; i < a.virtual_pages.size(); ++i) {
            v2p_.erase(a.virtual_pages[i]);
            p2v_[static_cast<std::size_t>(a.physical_pages[i])] = unbound;
        }
        free_phys_.insert(free_phys_.begin(), a.physical_pages.begin(),
                          a.physical_pages.begin() + static_cast<std::ptrdiff_t>(a.drained));
        if (a.ids_from_free_list)
            free_ids_.insert(free_ids_.begin(), a.virtual_pages.begin(), a.virtual_pages.end());
        wm_ = a.watermark_before;
        anchor_ = a.anchor_before;
        if (lazy())
            live_page_count_ -= static_cast<index_t>(a.virtual_pages.size());
    }

    std::vector<index_t> bound_only(const std::vector<index_t>& tokens) const {
        std::vector<index_t> out;
        for (index_t t : tokens)
            if (t >= 0 && v2p_.count(t / page_size()) != 0)
                out.push_back(t);
        return out;
    }

    // The pages a free releases, in the reference's order: a lazy side's
    // page-size-1 ids in the caller's order (kvpool: each once), every other
    // free ascending (torch.unique).
    std::vector<index_t> pages_of(const std::vector<index_t>& tokens) const {
        std::vector<index_t> pages;
        for (index_t t : tokens) {
            const index_t v = t / page_size();
            if (t < 0 || v < min_virtual_page_ || v2p_.count(v) == 0)
                throw std::logic_error("model free: token " + std::to_string(t) +
                                       " is not allocated");
            if (lazy() && page_size() == 1) {
                if (std::find(pages.begin(), pages.end(), v) == pages.end())
                    pages.push_back(v);
            } else {
                pages.push_back(v);
            }
        }
        if (!(lazy() && page_size() == 1)) {
            std::sort(pages.begin(), pages.end());
            pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
        }
        return pages;
    }

    void free_pages(const std::vector<index_t>& pages) {
        if (pages.empty())
            return;
        if (window_open())
            throw std::logic_error("model free: inside a backup window");
        std::vector<index_t> physical;
        for (index_t v : pages) {
            physical.push_back(v2p_.at(v));
            v2p_.erase(v);
        }
        if (id_owner_)
            free_ids_.insert(free_ids_.end(), pages.begin(), pages.end());
        if (lazy()) {
            // _free_lazy: holes at the back of the free list, in this order.
            for (index_t p : physical) {
                p2v_[static_cast<std::size_t>(p)] = unbound;
                free_phys_.push_back(p);
            }
            live_page_count_ -= static_cast<index_t>(physical.size());
        } else {
            // kvpool: the eager free waits for the forward in flight (the
            // reference waits for the forward stream).
            wait_for(latest_event_);
            compact_pending(physical);
        }
    }

    // _compact_pending: the band shrinks by K at the frontier; the survivors of
    // the vacated positions (ascending) move into the holes of the kept band
    // (ascending).
    void compact_pending(const std::vector<index_t>& freed) {
        const std::set<index_t> freed_set(freed.begin(), freed.end());
        const auto k = static_cast<index_t>(freed_set.size());
        const index_t old_wm = wm_;
        const index_t new_wm = up() ? old_wm - k : old_wm + k;
        const index_t vacated_lo = up() ? new_wm : old_wm + 1;
        const index_t vacated_hi = up() ? old_wm : new_wm + 1;
        std::vector<index_t> src, dst;
        for (index_t s = vacated_lo; s < vacated_hi; ++s)
            if (freed_set.count(s) == 0)
                src.push_back(s);
        for (index_t h : freed_set)
            if (h < vacated_lo || h >= vacated_hi)
                dst.push_back(h);
        if (src.size() != dst.size())
            throw std::logic_error("model eager free: survivors != holes");
        wm_ = new_wm;
        std::vector<index_t> moved;
        for (index_t s : src)
            moved.push_back(p2v_[static_cast<std::size_t>(s)]);
        for (index_t p = vacated_lo; p < vacated_hi; ++p)
            p2v_[static_cast<std::size_t>(p)] = unbound;
        for (std::size_t i = 0; i < src.size(); ++i) {
            v2p_[moved[i]] = dst[i];
            p2v_[static_cast<std::size_t>(dst[i])] = moved[i];
        }
    }

    void wait_for(const Token& event) {
        if (event && !event->is_complete())
            waits_.push_back(event);
    }

    // _drain_pending_reuse: batches whose event has fired (or every batch,
    // urgent, after a wait) rejoin the free list in batch order.
    void drain_pending(bool urgent) {
        std::vector<PendingBatch> kept;
        for (auto& batch : pending_) {
            const bool fired = !batch.event || batch.event->is_complete();
            if (!fired && !urgent) {
                kept.push_back(std::move(batch));
                continue;
            }
            if (!fired)
                wait_for(batch.event);
            for (index_t p : batch.pages)
                pending_set_.erase(p);
            free_phys_.insert(free_phys_.end(), batch.pages.begin(), batch.pages.end());
        }
        pending_.swap(kept);
    }

    // _absorb_boundary_holes: the watermark retreats past free pages already
    // touching it; returns the interior holes (ascending).
    std::vector<index_t> absorb_boundary_holes() {
        const std::size_t m = free_phys_.size();
        std::size_t n = 0;
        if (up()) {
            while (n < m && free_phys_[m - 1 - n] == wm_ - 1 - static_cast<index_t>(n))
                ++n;
            wm_ -= static_cast<index_t>(n);
            free_phys_.resize(m - n);
        } else {
            while (n < m && free_phys_[n] == wm_ + 1 + static_cast<index_t>(n))
                ++n;
            wm_ += static_cast<index_t>(n);
            free_phys_.erase(free_phys_.begin(),
                             free_phys_.begin() + static_cast<std::ptrdiff_t>(n));
        }
        return free_phys_;
    }

    // _topmost_survivor: the live page nearest the frontier, from the cursor
    // on, skipping the interior holes and the pages pending reuse.
    std::optional<index_t> topmost_survivor(std::optional<index_t> cursor,
                                            const std::vector<index_t>& holes) const {
        const auto skipped = [&](index_t p) {
            return std::binary_search(holes.begin(), holes.end(), p) || pending_set_.count(p) != 0;
        };
        if (up()) {
            for (index_t p = cursor && *cursor < wm_ ? *cursor : wm_ - 1; p >= base(); --p)
                if (!skipped(p))
                    return p;
        } else {
            for (index_t p = cursor && *cursor > wm_ ? *cursor : wm_ + 1; p < num_pages(); ++p)
                if (!skipped(p))
                    return p;
        }
        return std::nullopt;
    }

    // _materialize_inflight_write_set: the physical pages the forward in
    // flight writes (its virtual tokens through v2p, tombstones clamped to the
    // sink), empty once it has completed.
    std::set<index_t> inflight_write_set() {
        if (!inflight_event_)
            return {};
        if (inflight_event_->is_complete()) {
            inflight_event_ = nullptr;
            return {};
        }
        std::set<index_t> pages;
        for (index_t t : inflight_tokens_)
            pages.insert(std::max<index_t>(0, physical_of_virtual(t / page_size())));
        return pages;
    }

    // _commit_move_batch: remap; the moved-from pages rejoin the free list at
    // the end of the flush when the readers' event has fired, else wait for it
    // in the batch of that event. kvpool: a later batch of the same event
    // joins the earlier one (the reference's dict entry replaced it, and the
    // earlier pages were never reused). Returns the moves, then clears them.
    index_t commit_moves(std::vector<index_t>& srcs, std::vector<index_t>& dsts,
                         const Token& latest, std::vector<index_t>& released) {
        const auto n = static_cast<index_t>(srcs.size());
        for (std::size_t i = 0; i < srcs.size(); ++i) {
            const index_t v = p2v_[static_cast<std::size_t>(srcs[i])];
            v2p_[v] = dsts[i];
            p2v_[static_cast<std::size_t>(dsts[i])] = v;
            p2v_[static_cast<std::size_t>(srcs[i])] = unbound;
        }
        if (!latest || latest->is_complete()) {
            released.insert(released.end(), srcs.begin(), srcs.end());
        } else if (n > 0) {
            auto batch = std::find_if(pending_.begin(), pending_.end(),
                                      [&](const PendingBatch& b) { return b.event == latest; });
            if (batch == pending_.end())
                batch = pending_.insert(pending_.end(), PendingBatch{latest, {}});
            batch->pages.insert(batch->pages.end(), srcs.begin(), srcs.end());
            pending_set_.insert(srcs.begin(), srcs.end());
        }
        srcs.clear();
        dsts.clear();
        return n;
    }

    SubPoolGeometry g_;
    index_t total_bytes_;
    bool lazy_;
    index_t max_moves_;
    ReferenceSide* lower_ = nullptr; // the neighbouring bands
    ReferenceSide* upper_ = nullptr;
    bool relocations_held_ = false;
    bool id_owner_ = true;
    index_t min_virtual_page_ = g_.min_page_index;
    index_t virtual_pages_ = g_.num_virtual_pages;

    index_t wm_ = 0;                 // up: first page past the band; down: the page just below it
    index_t anchor_ = 0;             // a floating band's first page
    std::map<index_t, index_t> v2p_; // live virtual page -> physical page
    std::vector<index_t> p2v_;
    std::deque<index_t> free_ids_;
    std::vector<index_t> free_phys_; // _free_phys_pages, in order
    std::vector<PendingBatch> pending_;
    std::set<index_t> pending_set_;
    index_t live_page_count_ = 0;

    Token latest_event_;
    Token inflight_event_;
    std::vector<index_t> inflight_tokens_;

    bool in_group_ = false;
    std::vector<index_t> group_;

    std::vector<Allocation> undo_log_;
    std::vector<std::size_t> window_depths_;
    Allocation last_;
    bool last_alloc_flushed_peer_ = false;
    std::vector<Token> waits_;
};

// The follower binds the virtual pages its owner just took; the owner's pages
// stay where they are meanwhile (its flush is held).
inline bool bind_follower(ReferenceSide& owner, ReferenceSide& follower) {
    // kvpool: a follower of smaller pages binds each owner page's pages.
    const index_t ratio = owner.page_size() / follower.page_size();
    std::vector<index_t> pages;
    for (index_t v : owner.last_allocated_virtual_pages())
        for (index_t j = 0; j < ratio; ++j)
            pages.push_back(v * ratio + j);
    owner.hold_relocations(true);
    const bool bound = follower.bind_virtual(pages);
    owner.hold_relocations(false);
    return bound;
}

// The KV calls the SWA pair and the tri-pool share: the full side allocates
// and the sliding-window side binds the same virtual pages, both or neither
// (Derived::both_or_neither makes the room); free releases both sides (window
// pages released before are skipped), free_swa the window's only.
template <class Derived> class ReferenceKvCalls {
public:
    std::optional<std::vector<index_t>> alloc(index_t need_tokens) {
        return self().both_or_neither(need_tokens / page_size(),
                                      [&] { return full().alloc(need_tokens); });
    }
    std::optional<std::vector<index_t>> alloc_extend(const std::vector<index_t>& prefix,
                                                     const std::vector<index_t>& seq,
                                                     const std::vector<index_t>& last_loc) {
        index_t pages = 0;
        for (std::size_t r = 0; r < seq.size(); ++r)
            pages += pages_covering(seq[r]) - pages_covering(prefix[r]);
        return self().both_or_neither(pages,
                                      [&] { return full().alloc_extend(prefix, seq, last_loc); });
    }
    std::optional<std::vector<index_t>> alloc_decode(const std::vector<index_t>& seq,
                                                     const std::vector<index_t>& last_loc) {
        index_t pages = 0;
        for (index_t s : seq)
            pages += pages_covering(s) - pages_covering(s - 1);
        return self().both_or_neither(pages, [&] { return full().alloc_decode(seq, last_loc); });
    }

    // kvpool: with smaller pages the sliding-window side frees every page
    // under the full pages freed, in the tokens' order (a page's first token).
    void free(const std::vector<index_t>& tokens) {
        const index_t ps = page_size(), swa_ps = swa().page_size();
        std::vector<index_t> swa_tokens;
        for (std::size_t i = 0; i < tokens.size(); ++i)
            if (ps == swa_ps)
                swa_tokens.push_back(tokens[i]);
            else if (i == 0 || tokens[i] / ps != tokens[i - 1] / ps)
                for (index_t k = 0; k < ps; k += swa_ps)
                    swa_tokens.push_back(tokens[i] / ps * ps + k);
        swa().free_if_bound(swa_tokens);
        full().free(tokens);
    }
    void free_swa(const std::vector<index_t>& tokens) {
        for (index_t t : tokens)
            if (t < 0 || full().live().count(t / page_size()) == 0)
                throw std::logic_error("model free_swa: token " + std::to_string(t) +
                                       " is not allocated");
        swa().free_if_bound(tokens);
    }

    // The sliding-window side's virtual pages (in its own pages) under pages
    // live on the full side, released on the sliding-window side.
    std::set<index_t> tombstones() const {
        const index_t ratio = self().full().page_size() / self().swa().page_size();
        std::set<index_t> out;
        for (const auto& [v, p] : self().full().live())
            for (index_t s = v * ratio; s < (v + 1) * ratio; ++s)
                if (self().swa().live().count(s) == 0)
                    out.insert(s);
        return out;
    }

protected:
    index_t pages_covering(index_t tokens) const {
        return (tokens + page_size() - 1) / page_size();
    }

private:
    Derived& self() { return static_cast<Derived&>(*this); }
    const Derived& self() const { return static_cast<const Derived&>(*this); }
    ReferenceSide& full() { return self().full(); }
    ReferenceSide& swa() { return self().swa(); }
    index_t page_size() const { return self().page_size(); }
};

// UnifiedSWATokenToKVPoolAllocator: the full side mints the virtual ids, the
// SWA side (a non-owner) binds the same virtual pages; every allocation binds
// both sides or neither. free releases both sides (SWA pages released before
// skipped), free_swa the SWA side only.
class ReferenceSwaPair : public ReferenceKvCalls<ReferenceSwaPair> {
public:
    ReferenceSwaPair(const SubPoolGeometry& full, const SubPoolGeometry& swa, index_t total_bytes,
                     const AllocatorOptions& full_options, const AllocatorOptions& swa_options)
        : full_(full, total_bytes, full_options), swa_(swa, total_bytes, swa_options) {
        full_.bind_peer(swa_);
        swa_.bind_ids_of(full_);
    }

    ReferenceSide& full() { return full_; }
    ReferenceSide& swa() { return swa_; }
    const ReferenceSide& full() const { return full_; }
    const ReferenceSide& swa() const { return swa_; }
    index_t page_size() const { return full_.page_size(); }

    // available_size(): the joint budget of one allocation, each page costing
    // a page on both sides. Phase 1: both drain holes; phase 2: the side with
    // fewer holes extends while the other drains; phase 3: both extend. Capped
    // by each side's holes plus index room (eager sides have no holes, which
    // leaves the eager formula). kvpool: also by each side's ids.
    // kvpool: an SWA side of smaller pages (ratio of them per full page) takes
    // the largest k whose max(0, k - h_f) full and max(0, ratio * k - h_s) SWA
    // pages fit in the gap, the same phases with ratio 1.
    index_t available_pages() const {
        const index_t e_f = full_.page_bytes(), e_s = swa_.page_bytes();
        index_t gap = full_.gap_bytes();
        const index_t h_f = full_.hole_count(), h_s = swa_.hole_count();
        if (ratio() > 1) {
            index_t k = 0;
            while ((std::max<index_t>(0, k + 1 - h_f) * e_f +
                    std::max<index_t>(0, ratio() * (k + 1) - h_s) * e_s) <= gap)
                ++k;
            return std::min({k, h_f + full_.index_headroom(),
                             (h_s + swa_.index_headroom()) / ratio(), full_.free_id_count(),
                             swa_.free_id_count() / ratio()});
        }
        const index_t k1 = std::min(h_f, h_s);
        const index_t e_phase2 = h_f <= h_s ? e_f : e_s;
        const index_t k2 = std::min((h_f <= h_s ? h_s : h_f) - k1, gap / e_phase2);
        gap -= k2 * e_phase2;
        const index_t k3 = gap / (e_f + e_s);
        return std::min({k1 + k2 + k3, h_f + full_.index_headroom(), h_s + swa_.index_headroom(),
                         full_.free_id_count(), swa_.free_id_count()});
    }
    index_t available_size() const { return available_pages() * page_size(); }
    // What one allocation can take once a shortfall's urgent flushes have
    // packed both sides (their pending pages released too): every hole and
    // pending page is gap again. A test's view, not the reference's.
    index_t available_after_flush_size() const {
        const index_t e_f = full_.page_bytes(), e_s = swa_.page_bytes();
        const index_t free_f = full_.hole_count() + full_.pending_pages();
        const index_t free_s = swa_.hole_count() + swa_.pending_pages();
        const index_t gap = full_.gap_bytes() + (full_.lazy() ? free_f * e_f : 0) +
                            (swa_.lazy() ? free_s * e_s : 0);
        const index_t room_f = full_.index_headroom() + (full_.lazy() ? free_f : 0);
        const index_t room_s = swa_.index_headroom() + (swa_.lazy() ? free_s : 0);
        return std::min({gap / (e_f + ratio() * e_s), room_f, room_s / ratio(),
                         full_.free_id_count(), swa_.free_id_count() / ratio()}) *
               page_size();
    }
    index_t conserve_full_available_size() const {
        return full_.geometry().page_capacity() * page_size() - full_.allocated_count();
    }
    index_t conserve_swa_available_size() const {
        return swa_.geometry().page_capacity() * swa_.page_size() - swa_.allocated_count();
    }
    // SWA pages per full page.
    index_t ratio() const { return full_.page_size() / swa_.page_size(); }
    index_t full_available_size() const {
        return std::min(conserve_full_available_size(), full_.schedulable_available_size());
    }
    index_t swa_available_size() const {
        return std::min(conserve_swa_available_size(), swa_.schedulable_available_size());
    }

    // True when the last allocation flushed a side (pages may have moved).
    bool last_alloc_flushed() const { return last_alloc_flushed_; }

    void free_group_begin() {
        full_.free_group_begin();
        swa_.free_group_begin();
    }
    void free_group_end() {
        full_.free_group_end();
        swa_.free_group_end();
    }
    index_t flush_opportunistic() {
        return full_.flush_opportunistic() + swa_.flush_opportunistic();
    }

private:
    friend class ReferenceKvCalls<ReferenceSwaPair>;

    // The joint check; a shortfall flushes both sides urgently once
    // (_flush_both_for_alloc), then the full side allocates and the SWA side
    // binds the same virtual pages. kvpool: if the SWA side cannot, the full
    // side's allocation is undone (the reference asserts).
    template <class AllocateFull>
    std::optional<std::vector<index_t>> both_or_neither(index_t pages,
                                                        AllocateFull&& allocate_full) {
        last_alloc_flushed_ = false;
        if (pages > available_pages()) {
            last_alloc_flushed_ = full_.lazy() || swa_.lazy();
            full_.flush(true);
            swa_.flush(true);
            if (pages > available_pages())
                return std::nullopt;
        }
        auto tokens = allocate_full();
        last_alloc_flushed_ = last_alloc_flushed_ || full_.last_alloc_flushed_peer();
        if (!tokens)
            return std::nullopt;
        if (!bind_follower(full_, swa_)) {
            full_.undo_last_allocation();
            return std::nullopt;
        }
        return tokens;
    }

    ReferenceSide full_;
    ReferenceSide swa_;
    bool last_alloc_flushed_ = false;
};

// UnifiedMambaTokenToKVPoolAllocator: full KV (paged) and per-request state
// slots (page size 1), each side owning its own ids, sharing one gap. The
// sides' calls are the plain ReferenceSide ones; this adds the composite views.
class ReferenceMambaPair {
public:
    ReferenceMambaPair(const SubPoolGeometry& full, const SubPoolGeometry& state,
                       index_t total_bytes, const AllocatorOptions& full_options,
                       const AllocatorOptions& state_options)
        : full_(full, total_bytes, full_options), state_(state, total_bytes, state_options) {
        full_.bind_peer(state_);
    }

    ReferenceSide& full() { return full_; }
    ReferenceSide& state() { return state_; }
    const ReferenceSide& full() const { return full_; }
    const ReferenceSide& state() const { return state_; }

    // mamba_slot_full_token_cost(): full tokens of gap one state slot takes.
    index_t state_slot_full_token_cost() const {
        const index_t token_bytes = full_.geometry().spec.entry_bytes;
        return (state_.page_bytes() + token_bytes - 1) / token_bytes;
    }
    // available_size(): full tokens schedulable once the state side's holes
    // are compacted.
    index_t available_size() const { return full_.schedulable_available_size(); }
    index_t state_slots_available() const { return state_.available_size(); }
    // kvpool: the starvation the reference leaves silent. The gap, even with
    // the full side's holes compacted away, is narrower than one state slot
    // and the state side has no hole to reuse, while the full side can still
    // allocate.
    bool state_slot_starved() const {
        const index_t full_holes_bytes = full_.lazy() ? full_.hole_count() * full_.page_bytes() : 0;
        return state_.hole_count() == 0 &&
               state_.gap_bytes() + full_holes_bytes < state_.page_bytes() &&
               full_.available_size() > 0;
    }

    index_t flush_opportunistic() {
        return full_.flush_opportunistic() + state_.flush_opportunistic();
    }

private:
    ReferenceSide full_;
    ReferenceSide state_;
};

// kvpool's tri-pool (UnifiedMambaSWAAllocator; README, "The tri-pool"), which
// the reference does not have: [state slots up | sliding-window KV floating |
// full KV down]. The full side mints the KV ids and the sliding-window side
// binds them (both or neither, as in the SWA pair); state slots own theirs.
class ReferenceTriPool : public ReferenceKvCalls<ReferenceTriPool> {
public:
    ReferenceTriPool(const SubPoolGeometry& state, const SubPoolGeometry& swa,
                     const SubPoolGeometry& full, index_t total_bytes,
                     const AllocatorOptions& full_options, const AllocatorOptions& swa_options,
                     const AllocatorOptions& state_options)
        : state_(state, total_bytes, state_options), swa_(swa, total_bytes, swa_options),
          full_(full, total_bytes, full_options) {
        state_.bind_peer(swa_);
        swa_.bind_peer(full_);
        swa_.bind_ids_of(full_);
    }

    ReferenceSide& full() { return full_; }
    ReferenceSide& swa() { return swa_; }
    ReferenceSide& state() { return state_; }
    const ReferenceSide& full() const { return full_; }
    const ReferenceSide& swa() const { return swa_; }
    const ReferenceSide& state() const { return state_; }
    index_t page_size() const { return full_.page_size(); }

    // available_size(): the most pages n one KV allocation gets with no
    // flush. Each side takes its holes first; the rest is new pages. The full
    // side's new pages come from the gap above the sliding-window band, the
    // band's from either gap; when the band can shift away from the full
    // side, both gaps pool, less a page of the band's size at each of its two
    // edges (what the page sizes may fail to tile there). With decoupled page
    // sizes each full page takes ratio sliding-window pages (as in the SWA pair).
    index_t available_pages() const {
        const index_t e_f = full_.page_bytes(), e_s = swa_.page_bytes();
        const index_t above = swa_.gap_above_bytes(), below = swa_.gap_below_bytes();
        const index_t h_f = full_.hole_count(), h_s = swa_.hole_count();
        const index_t ratio = full_.page_size() / swa_.page_size();
        const bool shifts = swa_.shiftable_bytes(false) > 0;
        const index_t most = std::min({full_.free_id_count(), h_f + full_.index_headroom(),
                                       (h_s + swa_.index_headroom()) / ratio});
        index_t n = 0;
        for (; n < most; ++n) {
            const index_t new_f = std::max<index_t>(0, n + 1 - h_f);
            const index_t new_s = std::max<index_t>(0, ratio * (n + 1) - h_s);
            const bool fits =
                shifts ? new_f * e_f + new_s * e_s <= above + below - 2 * e_s
                       : new_f <= above / e_f && new_s <= (above - new_f * e_f) / e_s + below / e_s;
            if (!fits)
                break;
        }
        return n;
    }
    index_t available_size() const { return available_pages() * page_size(); }
    index_t state_slots_available() const { return state_.schedulable_available_size(); }
    index_t state_slot_full_token_cost() const {
        const index_t token_bytes = full_.geometry().spec.entry_bytes;
        return (state_.page_bytes() + token_bytes - 1) / token_bytes;
    }
    // True when the last allocation flushed or shifted a band (pages may have moved).
    bool last_alloc_relocated() const { return last_relocated_; }

    // State slots: the state side's own room (a shift of the band included);
    // short, a lazy full side packs (the band can then shift further) and the
    // slots are tried once more.
    std::optional<std::vector<index_t>> alloc_state_slots(index_t count) {
        auto slots = state_.alloc(count);
        last_relocated_ = state_.last_alloc_flushed_peer();
        if (slots || !full_.lazy())
            return slots;
        full_.flush(true);
        last_relocated_ = true;
        return state_.alloc(count);
    }
    void free_state_slots(const std::vector<index_t>& slots) { state_.free(slots); }

    void free_group_begin() {
        for (ReferenceSide* side : sides())
            side->free_group_begin();
    }
    void free_group_end() {
        swa_.free_group_end();
        full_.free_group_end();
        state_.free_group_end();
    }
    index_t flush_opportunistic() {
        index_t moved = 0;
        for (ReferenceSide* side : sides())
            moved += side->flush_opportunistic();
        return moved;
    }
    void backup() {
        for (ReferenceSide* side : sides())
            side->backup();
    }
    void restore() {
        for (ReferenceSide* side : sides())
            side->restore();
    }
    void commit() {
        for (ReferenceSide* side : sides())
            side->commit();
    }

private:
    friend class ReferenceKvCalls<ReferenceTriPool>;
    std::vector<ReferenceSide*> sides() { return {&full_, &swa_, &state_}; }

    // Short of available_pages(), every lazy side packs first (each opens gap
    // for a neighbour); then the full side allocates (shifting the band down
    // if short) and the sliding-window side binds the same pages (its lazy
    // neighbours flushed if short), or the full side's allocation is undone.
    template <class AllocateFull>
    std::optional<std::vector<index_t>> both_or_neither(index_t pages,
                                                        AllocateFull&& allocate_full) {
        last_relocated_ = false;
        if (pages > available_pages())
            for (ReferenceSide* side : {&state_, &swa_, &full_})
                if (side->lazy()) {
                    side->flush(true);
                    last_relocated_ = true;
                }
        auto tokens = allocate_full();
        last_relocated_ = last_relocated_ || full_.last_alloc_flushed_peer();
        if (!tokens)
            return std::nullopt;
        const bool bound = bind_follower(full_, swa_);
        last_relocated_ = last_relocated_ || swa_.last_alloc_flushed_peer();
        if (!bound) {
            full_.undo_last_allocation();
            return std::nullopt;
        }
        return tokens;
    }

    ReferenceSide state_;
    ReferenceSide swa_;
    ReferenceSide full_;
    bool last_relocated_ = false;
};

} // namespace kvpool::test
