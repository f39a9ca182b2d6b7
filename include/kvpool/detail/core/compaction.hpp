// Compaction: how a band gives pages back. An eager free packs the band at
// once; a lazy side's free leaves holes that flush() walks survivors into,
// with moved-from pages awaiting reuse until the forward reading them is
// done; a floating band shifts away from a neighbour. It moves no page the
// move gate holds.
#pragma once

#include <kvpool/completion_token.hpp>
#include <kvpool/detail/core/band_tables.hpp>
#include <kvpool/detail/core/move_gate.hpp>

#include <functional>
#include <optional>
#include <vector>

namespace kvpool::detail {

// Moved-from pages waiting for their readers, one batch per token, in the
// order they return to the hole list.
struct PendingBatch {
    CompletionTokenPtr readers_done;
    std::vector<index_t> pages;
};

// What an eager free's compaction changed beyond the freed pages: the
// survivors it moved and the gates it settled, for a transaction that undoes
// the free without a journal.
struct CompactionRecord {
    std::vector<index_t> moved_virtual, move_src, move_dst;
    std::optional<std::vector<MoveGate::Gate>> gates_before;
};

class Compaction {
public:
    using move_starter = std::function<void()>;
    // See AllocatorCore::set_move_starter.
    void set_move_starter(move_starter starter) { move_starter_ = std::move(starter); }

    // ---- frees (the pages are bound; the caller checked the free is allowed) ----
    // physical, when given, holds the pages' physical pages as the caller
    // read them (else the free reads them).
    // A lazy side's: the pages become holes, at the back of the hole list.
    void free_lazy(const Band& band, const std::vector<index_t>& virtual_pages,
                   const index_t* physical);
    // An eager side's: the band shrinks by the freed pages at once, survivors
    // of the vacated frontier moving into the holes left inside it. record,
    // when given, receives what a rollback needs.
    void free_eager(const Band& band, MoveGate& gate, const std::vector<index_t>& virtual_pages,
                    CompactionRecord* record, const index_t* physical);

    // ---- a lazy side's flush (the caller checked it may relocate) ----
    // One pass; returns pages moved. See AllocatorCore::flush.
    index_t flush(const Band& band, MoveGate& gate, bool urgent);
    // Returns moved-from pages to the hole list: those whose readers are done,
    // or (urgent) all, the plan waiting for their readers.
    void drain_pending(const Band& band, bool urgent);
    index_t pending_pages() const { return pending_pages_; }
    const std::vector<PendingBatch>& pending_batches() const { return pending_.get(); }

    // ---- the forward pass ----
    void set_latest_forward_done(CompletionTokenPtr token) {
        latest_forward_done_ = std::move(token);
    }
    // The forward just launched writes these virtual tokens until token
    // completes (tracked on a lazy side only).
    void set_inflight_forward(const Band& band, CompletionTokenPtr token,
                              const index_t* virtual_tokens, index_t count);

    // ---- band shift (a floating side; the caller checked it may relocate) ----
    // The band's page limits, lowest_free and limit_above, are set by its
    // neighbours. See AllocatorCore::shift_away and shiftable_bytes.
    bool shift_away(const Band& band, const MoveGate& gate, bool from_below, index_t bytes,
                    index_t lowest_free, index_t limit_above);
    index_t shiftable_bytes(const BandView& band, bool from_below, index_t lowest_free,
                            index_t limit_above) const;

    void clear();

    // The scalars a transaction restores.
    struct Saved {
        index_t pending_pages;
        CompletionTokenPtr latest_forward_done, inflight_forward_done;
    };
    Saved saved() const { return {pending_pages_, latest_forward_done_, inflight_forward_done_}; }
    void restore_saved(const Saved& s) {
        pending_pages_ = s.pending_pages;
        latest_forward_done_ = s.latest_forward_done;
        inflight_forward_done_ = s.inflight_forward_done;
    }
    template <class F> void for_each_journal(const F& f) {
        f(pending_);
        f(inflight_virtual_pages_);
    }
    // The pending batches' pages, the forward's write set, and which tokens
    // are set (their completion is the device's timing, not state).
    void add_to(StateDigest& digest) const;

private:
    // The steps of flush(): retire the holes at the frontier (holes ordered
    // anchor first), settle the forward in flight (the readers moved-from
    // pages wait for, and the pages it writes), move survivors into holes,
    // and return the moved-from pages.
    index_t absorb_frontier_holes(const Band& band, std::vector<index_t>& holes,
                                  const std::vector<index_t>& gated);
    CompletionTokenPtr settle_forward(const Band& band, bool pack, std::vector<index_t>& write_set);
    std::vector<index_t> move_survivors(const Band& band, const std::vector<index_t>& holes,
                                        index_t cap, const std::vector<index_t>& write_set);
    void release_moved_from(const Band& band, const CompletionTokenPtr& readers,
                            const std::vector<index_t>& moved_from);
    void add_pending(const CompletionTokenPtr& readers_done, const std::vector<index_t>& pages);
    // Page src[k] onto dst[k] for every k, host mirror and plan; src[k] is
    // then in state src_after. Journaled in stretches where the pages lie close.
    // early: the move starter, if set, launches the moves before the bookkeeping.
    // src_virtual, when given, holds the virtual pages bound to src (already read).
    enum class MoveStart { with_plan, early };
    void move_pages(const Band& band, const std::vector<index_t>& src, const index_t* dst,
                    PageState src_after, MoveStart start = MoveStart::with_plan,
                    const index_t* src_virtual = nullptr);

    JournaledValue<std::vector<PendingBatch>> pending_;
    index_t pending_pages_ = 0;
    CompletionTokenPtr latest_forward_done_;
    CompletionTokenPtr inflight_forward_done_;
    JournaledValue<std::vector<index_t>> inflight_virtual_pages_;
    move_starter move_starter_;
};

} // namespace kvpool::detail
