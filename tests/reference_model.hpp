// A deliberately naive host model of one side of a two-sided unified buffer,
// for the differential test. Written from the design brief and SGLang's
// MultiEndedAllocator semantics, not from src/allocator_core.cpp: plain
// containers, linear scans, no cleverness. Only the geometry (SideGeometry) is
// shared with the library.
//
// What it models (everything complete: no completion tokens):
//   * a per-physical-page owner array and an explicit band [lo, hi) of pages;
//     the "up" side's band starts at min_page_index and grows upward, the
//     "down" side's band ends at num_physical_pages and grows downward;
//   * the byte gap between the up side's band end and the down side's band
//     start, shared by both sides;
//   * a FIFO free virtual page list (alloc takes from the front, free appends
//     the freed pages at the back in ascending virtual page order);
//   * eager mode: a free of K pages shrinks the band by K at the frontier and
//     moves the survivors of the vacated positions into the holes;
//   * lazy mode: a free leaves holes (FIFO list, in ascending virtual page
//     order), allocation drains holes first and then extends the frontier; a
//     flush retires holes at the frontier, then moves the survivors nearest
//     the frontier into the holes farthest from it until the two meet, capped
//     when opportunistic; urgent flushes pack fully; an allocation that falls
//     short flushes the (lazy) peer urgently once;
//   * available_size / schedulable_available_size;
//   * alloc / alloc_extend / alloc_decode token ids, tail-page reuse included;
//   * backup_state / restore_state / commit_state, windows nested (a stack of
//     whole-state copies; no flush moves anything while a window is open);
//   * a non-owner side (the SWA side of an SWA pair): it binds the virtual
//     pages its owner minted, in the owner's id space, and keeps no free list;
//   * the two pairs' composite rules (ReferenceSwaPair, ReferenceMambaPair),
//     from SGLang's UnifiedSWATokenToKVPoolAllocator and
//     UnifiedMambaTokenToKVPoolAllocator.
#pragma once

#include <kvpool/pool_layout.hpp>
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
    // Owner array values that are not virtual page ids.
    static constexpr index_t outside = -1; // not in the band (free space or sink)
    static constexpr index_t hole = -2;    // in the band, free (lazy only)
    static constexpr index_t vacated = -3; // transient: a page a flush just moved out of

    ReferenceSide(const SideGeometry& geometry, index_t total_bytes, CompactionMode mode,
                  index_t max_moves_per_flush)
        : g_(geometry), total_bytes_(total_bytes), mode_(mode), max_moves_(max_moves_per_flush) {
        const index_t n = g_.num_physical_pages;
        s_.owner.assign(static_cast<std::size_t>(n), outside);
        s_.owner[0] = 0; // the padding anchor, never part of the band
        if (up()) {
            s_.lo = s_.hi = g_.min_page_index;
        } else {
            s_.lo = s_.hi = n;
        }
        for (index_t v = g_.min_page_index; v < g_.num_virtual_pages; ++v)
            s_.free_ids.push_back(v);
    }

    void bind_peer(ReferenceSide& peer) {
        peer_ = &peer;
        peer.peer_ = this;
    }

    // Makes this (still empty) side a non-owner of owner's ids: its virtual
    // page space becomes the owner's, and its id headroom is its own page
    // capacity less its live pages.
    void bind_ids_of(const ReferenceSide& owner) {
        id_owner_ = false;
        min_virtual_page_ = owner.g_.min_page_index;
        virtual_pages_ = owner.g_.num_virtual_pages;
        s_.free_ids.clear();
    }

    // ------------------------------------------------------------ observation
    bool up() const { return g_.grow() == GrowDirection::up; }
    bool lazy() const { return mode_ == CompactionMode::lazy; }
    index_t page_size() const { return g_.page_size(); }
    const SideGeometry& geometry() const { return g_; }
    index_t band_pages() const { return s_.hi - s_.lo; }
    index_t hole_count() const { return static_cast<index_t>(s_.holes.size()); }
    index_t free_id_count() const {
        return id_owner_ ? static_cast<index_t>(s_.free_ids.size())
                         : g_.page_capacity() - live_pages();
    }
    // Rows of the virtual page table: the id owner's virtual page space.
    index_t virtual_table_pages() const { return virtual_pages_; }
    // Virtual pages the last successful allocation or binding took, in order.
    const std::vector<index_t>& last_allocated_virtual_pages() const { return last_pages_; }
    index_t live_pages() const { return static_cast<index_t>(s_.v2p.size()); }
    index_t allocated_count() const { return live_pages() * page_size(); }
    bool window_open() const { return s_.window_open; }
    // virtual page -> physical page of every live page, ordered by virtual page.
    const std::map<index_t, index_t>& live() const { return s_.v2p; }
    // Physical page -> virtual page, unbound (-1) for free pages; 0 <-> 0 kept.
    index_t virtual_of_physical(index_t p) const {
        const index_t o = s_.owner[static_cast<std::size_t>(p)];
        return o >= 0 ? o : unbound;
    }
    index_t physical_of_virtual(index_t v) const {
        if (v == 0)
            return 0;
        auto it = s_.v2p.find(v);
        return it == s_.v2p.end() ? unbound : it->second;
    }
    // True when the last allocation attempt on this side flushed the peer.
    bool last_alloc_flushed_peer() const { return last_alloc_flushed_peer_; }

    index_t gap_bytes() const {
        // The gap lies between the up side's band end and the down side's band start.
        if (up()) {
            const index_t limit = peer_ ? peer_->s_.lo * peer_->g_.page_bytes : total_bytes_;
            return std::max<index_t>(0, limit - s_.hi * g_.page_bytes);
        }
        const index_t limit = peer_ ? peer_->s_.hi * peer_->g_.page_bytes : 0;
        return std::max<index_t>(0, s_.lo * g_.page_bytes - limit);
    }
    // Page indices left between the frontier and the end of this side's index range.
    index_t index_headroom() const {
        return up() ? g_.num_physical_pages - s_.hi : s_.lo - g_.min_page_index;
    }
    index_t pages_allocatable(index_t extra_gap_bytes) const {
        const index_t extend =
            std::min(index_headroom(), (gap_bytes() + extra_gap_bytes) / g_.page_bytes);
        return std::min(free_id_count(), extend + hole_count());
    }
    index_t available_size() const { return pages_allocatable(0) * page_size(); }
    // What an urgent flush of the peer would add: its holes, unless the peer
    // is lazy-less or inside a backup window (where its flushes move nothing).
    index_t schedulable_available_size() const {
        const bool drainable = peer_ && peer_->lazy() && !peer_->window_open();
        const index_t extra = drainable ? peer_->hole_count() * peer_->g_.page_bytes : 0;
        return pages_allocatable(extra) * page_size();
    }

    std::string describe() const {
        std::ostringstream o;
        o << "model{" << g_.spec.name << " grow=" << to_string(g_.grow())
          << " mode=" << to_string(mode_) << " band=[" << s_.lo << "," << s_.hi
          << ") live=" << live_pages() << " holes=" << hole_count()
          << " free_ids=" << free_id_count() << " gap_bytes=" << gap_bytes() << "}";
        return o.str();
    }

    // ------------------------------------------------------------ allocation
    // need_tokens must be a multiple of the page size.
    std::optional<std::vector<index_t>> alloc(index_t need_tokens) {
        if (need_tokens % page_size() != 0)
            throw std::logic_error("model alloc: misaligned size");
        auto pages = take(need_tokens / page_size());
        if (!pages)
            return std::nullopt;
        std::vector<index_t> tokens;
        for (index_t v : *pages)
            for (index_t j = 0; j < page_size(); ++j)
                tokens.push_back(v * page_size() + j);
        return tokens;
    }

    // Request r grows from prefix[r] to seq[r] tokens; last_loc[r] is the virtual
    // id of its token at position prefix[r] - 1 (unused when prefix[r] == 0).
    std::optional<std::vector<index_t>> alloc_extend(const std::vector<index_t>& prefix,
                                                     const std::vector<index_t>& seq,
                                                     const std::vector<index_t>& last_loc) {
        const index_t ps = page_size();
        index_t pages = 0;
        for (std::size_t r = 0; r < seq.size(); ++r)
            pages += pages_covering(seq[r]) - pages_covering(prefix[r]);
        auto fresh = take(pages);
        if (!fresh)
            return std::nullopt;
        std::vector<index_t> tokens;
        std::size_t next_fresh = 0;
        for (std::size_t r = 0; r < seq.size(); ++r) {
            const index_t prefix_pages = pages_covering(prefix[r]);
            std::vector<index_t> mine; // this request's new pages, in order
            for (index_t k = prefix_pages; k < pages_covering(seq[r]); ++k)
                mine.push_back((*fresh)[next_fresh++]);
            for (index_t pos = prefix[r]; pos < seq[r]; ++pos) {
                if (pos / ps < prefix_pages)
                    tokens.push_back(last_loc[r] +
                                     (pos - (prefix[r] - 1))); // same page as the prefix's end
                else
                    tokens.push_back(mine[static_cast<std::size_t>(pos / ps - prefix_pages)] * ps +
                                     pos % ps);
            }
        }
        return tokens;
    }

    // One new token per request; seq[r] counts it.
    std::optional<std::vector<index_t>> alloc_decode(const std::vector<index_t>& seq,
                                                     const std::vector<index_t>& last_loc) {
        const index_t ps = page_size();
        index_t pages = 0;
        for (index_t s : seq)
            pages += (s - 1) % ps == 0 ? 1 : 0;
        auto fresh = take(pages);
        if (!fresh)
            return std::nullopt;
        std::vector<index_t> tokens;
        std::size_t next_fresh = 0;
        for (std::size_t r = 0; r < seq.size(); ++r) {
            if ((seq[r] - 1) % ps == 0)
                tokens.push_back((*fresh)[next_fresh++] * ps);
            else
                tokens.push_back(last_loc[r] + 1);
        }
        return tokens;
    }

    // Non-owner: binds the owner's virtual pages, in order, to pages of this
    // side; false when there is no room (after one urgent peer flush, lazy).
    bool bind_virtual(const std::vector<index_t>& virtual_pages) {
        if (id_owner_)
            throw std::logic_error("model bind_virtual: on the id owner");
        return take(static_cast<index_t>(virtual_pages.size()), &virtual_pages).has_value();
    }

    // ------------------------------------------------------------ free
    // Frees every page holding one of the tokens. The caller (the test) never
    // frees an unallocated id; the model treats that as a test bug.
    void free(const std::vector<index_t>& tokens) {
        std::set<index_t> pages;
        for (index_t t : tokens) {
            const index_t v = t / page_size();
            if (t < 0 || v < min_virtual_page_ || s_.v2p.count(v) == 0)
                throw std::logic_error("model free: token " + std::to_string(t) +
                                       " is not allocated");
            pages.insert(v);
        }
        if (pages.empty())
            return;
        if (s_.window_open)
            throw std::logic_error("model free: inside a backup window");
        std::vector<index_t> physical;
        for (index_t v : pages) {
            physical.push_back(s_.v2p[v]);
            s_.v2p.erase(v);
        }
        if (lazy()) {
            for (index_t p : physical) { // ascending virtual page order
                s_.owner[static_cast<std::size_t>(p)] = hole;
                s_.holes.push_back(p);
            }
        } else {
            free_eager(physical);
        }
        if (id_owner_)
            for (index_t v : pages)
                s_.free_ids.push_back(v);
    }

    // Like free, but tokens whose page is not bound here are skipped (the SWA
    // side's pages already released by free_swa).
    void free_if_bound(const std::vector<index_t>& tokens) {
        std::vector<index_t> bound;
        for (index_t t : tokens)
            if (t >= 0 && s_.v2p.count(t / page_size()) != 0)
                bound.push_back(t);
        free(bound);
    }

    // ------------------------------------------------------------ flush
    // Returns the pages moved. No-op in eager mode and inside a backup window.
    index_t flush(bool urgent) {
        if (!lazy() || s_.window_open || s_.holes.empty())
            return 0;
        // Holes that touch the frontier leave the band without a move.
        while (band_pages() > 0 && owner_at_depth(band_pages() - 1) == hole) {
            set_owner_at_depth(band_pages() - 1, outside);
            retreat(1);
        }
        // Remaining holes, by depth (0 = the page farthest from the frontier).
        std::vector<index_t> hole_depths;
        for (index_t d = 0; d < band_pages(); ++d)
            if (owner_at_depth(d) == hole)
                hole_depths.push_back(d);
        // Survivors nearest the frontier move into the holes farthest from it.
        std::vector<index_t> moved_from; // physical pages, in move order
        index_t src = band_pages() - 1;
        std::size_t next_dst = 0;
        while (next_dst < hole_depths.size() &&
               (urgent || static_cast<index_t>(moved_from.size()) < max_moves_)) {
            while (src >= 0 && owner_at_depth(src) < 0)
                --src;
            if (src < 0)
                break;
            const index_t dst = hole_depths[next_dst];
            if (src < dst)
                break; // the pointers crossed: the band is packed
            const index_t v = owner_at_depth(src);
            const index_t dst_page = page_at_depth(dst);
            set_owner_at_depth(dst, v);
            s_.v2p[v] = dst_page;
            set_owner_at_depth(src, vacated);
            moved_from.push_back(page_at_depth(src));
            ++next_dst;
            --src;
        }
        s_.holes.clear();
        if (urgent) {
            // Full pack: everything free above the last survivor leaves the band.
            while (band_pages() > 0 && owner_at_depth(band_pages() - 1) < 0) {
                set_owner_at_depth(band_pages() - 1, outside);
                retreat(1);
            }
        }
        // Whatever is still free inside the band: the unused holes (ascending
        // physical page order), then the moved-from pages in move order.
        for (index_t p = s_.lo; p < s_.hi; ++p)
            if (s_.owner[static_cast<std::size_t>(p)] == hole)
                s_.holes.push_back(p);
        for (index_t p : moved_from)
            if (p >= s_.lo && p < s_.hi) {
                s_.owner[static_cast<std::size_t>(p)] = hole;
                s_.holes.push_back(p);
            }
        return static_cast<index_t>(moved_from.size());
    }

    // ------------------------------------------------------------ backup / restore
    // Snapshots nest; restore and commit act on the innermost one.
    void backup() {
        snapshots_.push_back(s_);
        s_.window_open = true;
    }
    void restore() {
        if (snapshots_.empty())
            throw std::logic_error("model restore: no window open");
        s_ = snapshots_.back();
        snapshots_.pop_back();
    }
    void commit() {
        if (snapshots_.empty())
            throw std::logic_error("model commit: no window open");
        snapshots_.pop_back();
        if (snapshots_.empty())
            s_.window_open = false;
    }
    std::size_t window_depth() const { return snapshots_.size(); }

private:
    struct State {
        std::vector<index_t> owner; // per physical page: virtual page, outside, hole
        index_t lo = 0, hi = 0;     // the band [lo, hi) of physical pages
        std::deque<index_t> free_ids;
        std::deque<index_t> holes;
        std::map<index_t, index_t> v2p;
        bool window_open = false;
    };

    index_t pages_covering(index_t tokens) const {
        return (tokens + page_size() - 1) / page_size();
    }

    // Depth d counts band pages from the anchor end (0) toward the frontier.
    index_t page_at_depth(index_t d) const { return up() ? s_.lo + d : s_.hi - 1 - d; }
    index_t owner_at_depth(index_t d) const {
        return s_.owner[static_cast<std::size_t>(page_at_depth(d))];
    }
    void set_owner_at_depth(index_t d, index_t o) {
        s_.owner[static_cast<std::size_t>(page_at_depth(d))] = o;
    }
    void retreat(index_t k) {
        if (up())
            s_.hi -= k;
        else
            s_.lo += k;
    }

    // Takes num_pages fresh virtual pages (or, on a non-owner, the given ones)
    // and binds them; nullopt when there is no room (after one urgent peer
    // flush in lazy mode).
    std::optional<std::vector<index_t>> take(index_t num_pages,
                                             const std::vector<index_t>* given = nullptr) {
        last_alloc_flushed_peer_ = false;
        last_pages_.clear();
        if (num_pages == 0)
            return std::vector<index_t>{};
        if (num_pages > pages_allocatable(0)) {
            if (lazy() && peer_ && peer_->lazy()) {
                peer_->flush(true);
                last_alloc_flushed_peer_ = true;
            }
            if (num_pages > pages_allocatable(0))
                return std::nullopt;
        }
        std::vector<index_t> physical;
        while (static_cast<index_t>(physical.size()) < num_pages && !s_.holes.empty()) {
            physical.push_back(s_.holes.front());
            s_.holes.pop_front();
        }
        const index_t extend = num_pages - static_cast<index_t>(physical.size());
        if (up()) {
            for (index_t k = 0; k < extend; ++k)
                physical.push_back(s_.hi + k);
            s_.hi += extend;
        } else {
            s_.lo -= extend;
            for (index_t k = 0; k < extend; ++k)
                physical.push_back(s_.lo + k);
        }
        std::vector<index_t> virtual_pages;
        for (index_t i = 0; i < num_pages; ++i) {
            const index_t v = given ? (*given)[static_cast<std::size_t>(i)] : s_.free_ids.front();
            if (!given)
                s_.free_ids.pop_front();
            const index_t p = physical[static_cast<std::size_t>(i)];
            if (s_.owner[static_cast<std::size_t>(p)] >= 0)
                throw std::logic_error("model take: physical page " + std::to_string(p) +
                                       " is in use");
            s_.owner[static_cast<std::size_t>(p)] = v;
            s_.v2p[v] = p;
            virtual_pages.push_back(v);
        }
        last_pages_ = virtual_pages;
        return virtual_pages;
    }

    void free_eager(const std::vector<index_t>& physical) {
        for (index_t p : physical)
            s_.owner[static_cast<std::size_t>(p)] = outside;
        const index_t k = static_cast<index_t>(physical.size());
        // The new band keeps the band_pages() - k pages nearest the anchor end.
        const index_t kept = band_pages() - k;
        std::vector<index_t> holes, survivors; // ascending physical pages
        for (index_t p : physical) {
            const index_t d = up() ? p - s_.lo : s_.hi - 1 - p;
            if (d < kept)
                holes.push_back(p);
        }
        for (index_t d = kept; d < band_pages(); ++d)
            if (owner_at_depth(d) >= 0)
                survivors.push_back(page_at_depth(d));
        std::sort(holes.begin(), holes.end());
        std::sort(survivors.begin(), survivors.end());
        if (holes.size() != survivors.size())
            throw std::logic_error("model free_eager: holes != survivors");
        for (std::size_t i = 0; i < holes.size(); ++i) {
            const index_t v = s_.owner[static_cast<std::size_t>(survivors[i])];
            s_.owner[static_cast<std::size_t>(holes[i])] = v;
            s_.owner[static_cast<std::size_t>(survivors[i])] = outside;
            s_.v2p[v] = holes[i];
        }
        retreat(k);
    }

    SideGeometry g_;
    index_t total_bytes_;
    CompactionMode mode_;
    index_t max_moves_;
    ReferenceSide* peer_ = nullptr;
    State s_;
    std::vector<State> snapshots_;
    bool last_alloc_flushed_peer_ = false;
    bool id_owner_ = true;
    index_t min_virtual_page_ = g_.min_page_index;
    index_t virtual_pages_ = g_.num_virtual_pages;
    std::vector<index_t> last_pages_;
};

// The SWA pair: the full side mints the virtual ids, the SWA side (a
// non-owner) binds the same virtual pages; every allocation binds both sides
// or neither. free releases both sides (SWA pages already released skipped),
// free_swa the SWA side only. From SGLang's UnifiedSWATokenToKVPoolAllocator.
class ReferenceSwaPair {
public:
    ReferenceSwaPair(const SideGeometry& full, const SideGeometry& swa, index_t total_bytes,
                     CompactionMode mode, index_t max_moves_per_flush)
        : full_(full, total_bytes, mode, max_moves_per_flush),
          swa_(swa, total_bytes, mode, max_moves_per_flush) {
        full_.bind_peer(swa_);
        swa_.bind_ids_of(full_);
    }
    // The sides point at each other.
    ReferenceSwaPair(const ReferenceSwaPair&) = delete;
    ReferenceSwaPair& operator=(const ReferenceSwaPair&) = delete;

    const ReferenceSide& full() const { return full_; }
    const ReferenceSide& swa() const { return swa_; }
    index_t page_size() const { return full_.page_size(); }

    // Joint pages one allocation can take now, each costing a page on both
    // sides. Phase 1: both sides drain holes; phase 2: the side with fewer
    // holes extends into the gap while the other still drains; phase 3: both
    // extend. Capped by each side's index range and ids (eager: no holes, so
    // the gap divided by both page sizes).
    index_t available_pages() const {
        const index_t e_full = full_.geometry().page_bytes, e_swa = swa_.geometry().page_bytes;
        const index_t h_full = full_.hole_count(), h_swa = swa_.hole_count();
        index_t gap = full_.gap_bytes();
        const index_t both_drain = std::min(h_full, h_swa);
        const index_t e_extends = h_full <= h_swa ? e_full : e_swa;
        const index_t one_extends = std::min(std::max(h_full, h_swa) - both_drain, gap / e_extends);
        gap -= one_extends * e_extends;
        const index_t both_extend = gap / (e_full + e_swa);
        return std::min({both_drain + one_extends + both_extend, h_full + full_.index_headroom(),
                         h_swa + swa_.index_headroom(), full_.free_id_count(),
                         swa_.free_id_count()});
    }
    index_t available_size() const { return available_pages() * page_size(); }
    // What one allocation can take once a shortfall's urgent flushes have packed
    // both sides: every hole is gap again.
    index_t available_after_flush_size() const {
        const index_t e_full = full_.geometry().page_bytes, e_swa = swa_.geometry().page_bytes;
        const index_t h_full = full_.hole_count(), h_swa = swa_.hole_count();
        const index_t gap = full_.gap_bytes() + h_full * e_full + h_swa * e_swa;
        return std::min({gap / (e_full + e_swa), h_full + full_.index_headroom(),
                         h_swa + swa_.index_headroom(), full_.free_id_count(),
                         swa_.free_id_count()}) *
               page_size();
    }
    // Slot conservation against each side's static capacity.
    index_t conserve_full_available_size() const {
        return full_.geometry().page_capacity() * page_size() - full_.allocated_count();
    }
    index_t conserve_swa_available_size() const {
        return swa_.geometry().page_capacity() * page_size() - swa_.allocated_count();
    }
    // The per-side scheduler views: the tighter of conservation and what the
    // side could take once its peer's holes are compacted.
    index_t full_available_size() const {
        return std::min(conserve_full_available_size(), full_.schedulable_available_size());
    }
    index_t swa_available_size() const {
        return std::min(conserve_swa_available_size(), swa_.schedulable_available_size());
    }

    std::optional<std::vector<index_t>> alloc(index_t need_tokens) {
        return both_or_neither(need_tokens / page_size(), [&] { return full_.alloc(need_tokens); });
    }
    std::optional<std::vector<index_t>> alloc_extend(const std::vector<index_t>& prefix,
                                                     const std::vector<index_t>& seq,
                                                     const std::vector<index_t>& last_loc) {
        index_t pages = 0;
        for (std::size_t r = 0; r < seq.size(); ++r)
            pages += pages_covering(seq[r]) - pages_covering(prefix[r]);
        return both_or_neither(pages, [&] { return full_.alloc_extend(prefix, seq, last_loc); });
    }
    std::optional<std::vector<index_t>> alloc_decode(const std::vector<index_t>& seq,
                                                     const std::vector<index_t>& last_loc) {
        index_t pages = 0;
        for (index_t s : seq)
            pages += pages_covering(s) - pages_covering(s - 1);
        return both_or_neither(pages, [&] { return full_.alloc_decode(seq, last_loc); });
    }
    // True when the last allocation ran an urgent flush on a side that had holes.
    bool last_alloc_flushed() const { return last_alloc_flushed_; }

    void free(const std::vector<index_t>& tokens) {
        full_.free(tokens);
        swa_.free_if_bound(tokens);
    }
    // Tokens that left the window: the SWA pages only; the ids stay live.
    void free_swa(const std::vector<index_t>& tokens) {
        for (index_t t : tokens)
            if (t < 0 || full_.live().count(t / page_size()) == 0)
                throw std::logic_error("model free_swa: token " + std::to_string(t) +
                                       " is not allocated");
        swa_.free_if_bound(tokens);
    }
    index_t flush_opportunistic() { return full_.flush(false) + swa_.flush(false); }

    // Virtual pages live on the full side whose SWA pages were released.
    std::set<index_t> tombstones() const {
        std::set<index_t> out;
        for (const auto& [v, p] : full_.live())
            if (swa_.live().count(v) == 0)
                out.insert(v);
        return out;
    }

private:
    index_t pages_covering(index_t tokens) const {
        return (tokens + page_size() - 1) / page_size();
    }

    // A shortfall flushes both sides urgently once (either side's compaction
    // opens gap for the other); then the full side allocates and the SWA side
    // binds the same virtual pages, or the full side's allocation is undone.
    template <class AllocateFull>
    std::optional<std::vector<index_t>> both_or_neither(index_t pages,
                                                        AllocateFull&& allocate_full) {
        last_alloc_flushed_ = false;
        if (pages > available_pages()) {
            last_alloc_flushed_ = full_.hole_count() + swa_.hole_count() > 0;
            full_.flush(true);
            swa_.flush(true);
            if (pages > available_pages())
                return std::nullopt;
        }
        // The undo window also keeps the SWA side's shortfall from flushing the
        // full side mid-allocation, as in the library.
        full_.backup();
        auto tokens = allocate_full();
        const bool ok = tokens && swa_.bind_virtual(full_.last_allocated_virtual_pages());
        last_alloc_flushed_ = last_alloc_flushed_ || full_.last_alloc_flushed_peer();
        if (ok)
            full_.commit();
        else
            full_.restore();
        return ok ? tokens : std::nullopt;
    }

    ReferenceSide full_;
    ReferenceSide swa_;
    bool last_alloc_flushed_ = false;
};

// The Mamba pair: full KV (paged) and per-request state slots (page size 1),
// each side owning its own ids, sharing one gap. The sides' calls are the
// plain ReferenceSide ones; this adds the composite views. From SGLang's
// UnifiedMambaTokenToKVPoolAllocator.
class ReferenceMambaPair {
public:
    ReferenceMambaPair(const SideGeometry& full, const SideGeometry& state, index_t total_bytes,
                       CompactionMode mode, index_t max_moves_per_flush)
        : full_(full, total_bytes, mode, max_moves_per_flush),
          state_(state, total_bytes, mode, max_moves_per_flush) {
        full_.bind_peer(state_);
    }
    ReferenceMambaPair(const ReferenceMambaPair&) = delete;
    ReferenceMambaPair& operator=(const ReferenceMambaPair&) = delete;

    ReferenceSide& full() { return full_; }
    ReferenceSide& state() { return state_; }
    const ReferenceSide& full() const { return full_; }
    const ReferenceSide& state() const { return state_; }

    // Full-token equivalents of the gap one state slot takes, rounded up.
    index_t state_slot_full_token_cost() const {
        const index_t token_bytes = full_.geometry().spec.entry_bytes;
        return (state_.geometry().page_bytes + token_bytes - 1) / token_bytes;
    }
    // Full tokens admissible once the state side's holes are compacted.
    index_t available_size() const { return full_.schedulable_available_size(); }
    index_t state_slots_available() const { return state_.available_size(); }
    // The gap, even with the full side's holes compacted away, is narrower than
    // one state slot and the state side has no hole to reuse, while the full
    // side can still allocate.
    bool state_slot_starved() const {
        const index_t full_holes_bytes =
            full_.lazy() ? full_.hole_count() * full_.geometry().page_bytes : 0;
        return state_.hole_count() == 0 &&
               state_.gap_bytes() + full_holes_bytes < state_.geometry().page_bytes &&
               full_.available_size() > 0;
    }

    index_t flush_opportunistic() { return full_.flush(false) + state_.flush(false); }

private:
    ReferenceSide full_;
    ReferenceSide state_;
};

} // namespace kvpool::test
