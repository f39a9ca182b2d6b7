// A deliberately naive host model of one side of a two-sided unified buffer,
// for the differential test. Written from the design brief and SGLang's
// MultiEndedAllocator semantics, not from src/allocator_core.cpp: plain
// containers, linear scans, no cleverness. Only the geometry (SideGeometry) is
// shared with the library.
//
// What it models (id-owner sides, everything complete: no completion tokens):
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
//     whole-state copies; no flush moves anything while a window is open).
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

    // ------------------------------------------------------------ observation
    bool up() const { return g_.grow() == GrowDirection::up; }
    bool lazy() const { return mode_ == CompactionMode::lazy; }
    index_t page_size() const { return g_.page_size(); }
    const SideGeometry& geometry() const { return g_; }
    index_t band_pages() const { return s_.hi - s_.lo; }
    index_t hole_count() const { return static_cast<index_t>(s_.holes.size()); }
    index_t free_id_count() const { return static_cast<index_t>(s_.free_ids.size()); }
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

    // ------------------------------------------------------------ free
    // Frees every page holding one of the tokens. The caller (the test) never
    // frees an unallocated id; the model treats that as a test bug.
    void free(const std::vector<index_t>& tokens) {
        std::set<index_t> pages;
        for (index_t t : tokens) {
            const index_t v = t / page_size();
            if (t < 0 || v < g_.min_page_index || s_.v2p.count(v) == 0)
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
        for (index_t v : pages)
            s_.free_ids.push_back(v);
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

    // Takes num_pages fresh virtual pages and binds them; nullopt when there is
    // no room (after one urgent peer flush in lazy mode).
    std::optional<std::vector<index_t>> take(index_t num_pages) {
        last_alloc_flushed_peer_ = false;
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
            const index_t v = s_.free_ids.front();
            s_.free_ids.pop_front();
            const index_t p = physical[static_cast<std::size_t>(i)];
            if (s_.owner[static_cast<std::size_t>(p)] >= 0)
                throw std::logic_error("model take: physical page " + std::to_string(p) +
                                       " is in use");
            s_.owner[static_cast<std::size_t>(p)] = v;
            s_.v2p[v] = p;
            virtual_pages.push_back(v);
        }
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
};

} // namespace kvpool::test
