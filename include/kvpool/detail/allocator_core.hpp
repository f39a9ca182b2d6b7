// The host control plane of one sub-allocator: the authoritative state (free
// virtual ids, watermark, holes, pages awaiting reuse, a mirror of v2p/p2v) and
// every policy decision. It never touches device memory: each call appends the
// device work it decided on to plan(), which a backend applies in one batch.
// The core orchestrates; the band's tables and the parts it owns live under
// detail/core/: the move gate, compaction, the backup window and the
// transaction log, each over the tables, none over the core.
#pragma once

#include <kvpool/allocator_options.hpp>
#include <kvpool/allocator_snapshot.hpp>
#include <kvpool/completion_token.hpp>
#include <kvpool/counters.hpp>
#include <kvpool/detail/core/backup_window.hpp>
#include <kvpool/detail/core/band_tables.hpp>
#include <kvpool/detail/core/compaction.hpp>
#include <kvpool/detail/core/move_gate.hpp>
#include <kvpool/detail/core/transaction_log.hpp>
#include <kvpool/detail/device_plan.hpp>
#include <kvpool/storage/pool_layout.hpp>

#include <deque>
#include <string>
#include <vector>

namespace kvpool {

namespace detail {

// Where every byte of a unified buffer is, over the chain of bands bound to one
// another: each byte in exactly one term. Gaps lie between two bands, or
// between an end of the buffer's pages and a band not anchored there;
// alignment is what no page of the end bands covers (the sink rounded up to
// the lowest band's pages, the tail short of a page of the highest band's).
// Overlap counts bytes two bands both claim (always 0 in a sound state).
struct BufferBytes {
    index_t live = 0;
    index_t holes = 0;
    index_t pending = 0;
    index_t gaps = 0;
    index_t overlap = 0;
    index_t sink = 0;
    index_t alignment = 0;
    index_t buffer = 0; // the buffer's size
    index_t accounted() const { return live + holes + pending + gaps + sink + alignment - overlap; }
};

class AllocatorCore final : private BandReport {
public:
    AllocatorCore(const SubPoolGeometry& geometry, index_t total_bytes, AllocatorOptions options);

    // Peers share the gap between their frontiers; bind both directions. A
    // non-owner takes over its peer's virtual id space (only while empty).
    void bind_peer(AllocatorCore* peer);
    // A band next to this one in the buffer (below or above it, by the
    // layout's positions); the id spaces stay apart. Bind both directions.
    void bind_neighbour(AllocatorCore* neighbour);
    AllocatorCore* lower_neighbour() const { return lower_; }
    AllocatorCore* upper_neighbour() const { return upper_; }
    bool is_floating() const { return geometry_.grow() == GrowDirection::floating; }

    const SubPoolGeometry& geometry() const { return geometry_; }
    const AllocatorOptions& options() const { return options_; }
    index_t page_size() const { return geometry_.spec.page_size; }
    bool is_lazy() const { return options_.mode == CompactionMode::lazy; }

    // ---- sizes, in tokens unless named pages ----
    // Allocatable now, without compacting the peer.
    index_t available_size() const;
    // Allocatable once the peer's drainable holes are compacted away: a lower
    // bound that an allocation of this size always reaches (the reference's
    // realisable view). Pages the peer holds for a forward's readers are not
    // credited, though an urgent flush reclaims them too, so an allocation
    // beyond it may still succeed.
    index_t schedulable_available_size() const;
    // Live tokens (holes and pages awaiting reuse excluded).
    index_t allocated_count() const { return tables_.live_pages * page_size(); }
    index_t live_pages() const { return tables_.live_pages; }
    index_t hole_pages() const { return static_cast<index_t>(tables_.holes.size()); }
    // Holes an allocation may reuse: those under no transfer.
    index_t usable_hole_pages() const;
    index_t pending_reuse_pages() const { return compaction_.pending_pages(); }
    index_t free_virtual_page_count() const;
    // Pages the band may still grow by, by index space alone (bytes aside).
    index_t index_headroom_pages() const;
    index_t watermark() const { return tables_.watermark; }
    // The band's first page on an up or floating side (it moves on a floating
    // one); one past its last page on a down side.
    index_t anchor() const { return tables_.anchor; }
    // Holes in the order allocations reuse them (front first).
    const std::deque<index_t>& hole_list() const { return tables_.holes.items(); }
    // Free virtual pages in the order allocations take them (front first).
    const JournaledRuns<index_t>& free_virtual_pages() const { return tables_.free_virtual_pages; }
    // Rows of the v2p table: the id owner's virtual page space.
    index_t virtual_table_pages() const { return static_cast<index_t>(tables_.v2p.size()); }
    index_t band_pages() const;
    index_t byte_low_frontier() const;
    index_t byte_high_frontier() const;
    // Free bytes between the band and its neighbour below (resp. above); the
    // gap a side grows into is the one its frontier faces (both for a
    // floating side).
    index_t gap_below_bytes() const;
    index_t gap_above_bytes() const;
    index_t gap_bytes() const;

    // ---- host mirror look-ups ----
    bool is_slot_allocated(index_t virtual_token) const;
    index_t physical_page_of(index_t virtual_page) const;
    index_t virtual_page_of(index_t physical_page) const;
    // Virtual token -> physical token, tombstones clamped to the sink (0).
    index_t translate_token(index_t virtual_token) const;

    // ---- allocation; false means "no room" and nothing changed ----
    // Decided by trying, as the reference does: any shortfall first flushes a
    // lazy peer urgently (which may free more than schedulable_available_size()
    // promised, e.g. pages awaiting reuse), so a flushed peer is the one change
    // a failed allocation can leave.
    // Id owner: take num_pages fresh virtual pages and bind each to a physical page.
    bool alloc_pages(index_t num_pages, PageBinding& out);
    // As alloc_pages, but too few free virtual ids fails at once, without
    // flushing the peer (the reference's alloc_extend and alloc_decode).
    bool alloc_request_pages(index_t num_pages, PageBinding& out);
    // Non-owner: bind the given (peer-minted) virtual pages to physical pages.
    bool bind_virtual_pages(const index_t* virtual_pages, index_t count, PageBinding& out);
    // The same for pages held as runs (an owner's binding, or the follower
    // pages made of it), checked a run at a time.
    bool bind_virtual_pages(const PageRunList& virtual_pages, PageBinding& out);
    // Takes back the allocation that filled binding, the last change made here
    // (the pair's follower could not bind it), counting it as failed.
    // Relocations are held meanwhile.
    void undo_allocation(const PageBinding& binding);
    // While held, flush() and shift_away() move nothing (a peer's allocation
    // is in progress).
    void hold_relocations(bool hold) { relocations_held_ = hold; }

    // ---- band shift (a floating side) ----
    // Makes at least bytes of room next to the neighbour below (from_below)
    // or above by moving this band's edge away from it: the live pages of the
    // vacated edge move into this band's holes (lowest first) and then into
    // the gap on its far side, keeping their virtual ids, in one plan with
    // the forward pass in flight waited for; holes and pages awaiting reuse
    // there leave the band. All or nothing: false, with nothing changed, when
    // the far gap and holes cannot take the pages, a page there is under a
    // transfer, relocations are held, or a backup window is open. Costs
    // O(holes + vacated pages).
    bool shift_away(bool from_below, index_t bytes);
    // Bytes shift_away() can always make next to that neighbour (0 for an
    // anchored side).
    index_t shiftable_bytes(bool from_below) const;

    // ---- free; misuse throws kvpool::Error and changes nothing ----
    // Frees every page that holds one of the tokens. skip_unbound ignores ids
    // already unbound (the SWA side's tokens that left the window) instead of
    // reporting them as double frees.
    void free_tokens(const index_t* virtual_tokens, index_t count, bool skip_unbound = false);
    void free_group_begin();
    void free_group_end();
    bool in_free_group() const { return in_free_group_; }
    // Throws the invalid_state error a free of bound pages raises now (inside a
    // backup window), so a composite can check both sides before freeing either.
    void check_free_allowed() const;
    // Throw what free_tokens (resp. free_group_end) would throw now, changing nothing.
    void check_free_tokens(const index_t* virtual_tokens, index_t count, bool skip_unbound) const;
    void check_free_group_end() const;

    // ---- lazy compaction ----
    // One compaction pass; returns pages moved. Urgent packs fully and waits for
    // the forward pass; opportunistic is capped and never moves a page the
    // in-flight forward writes. No-op in eager mode.
    index_t flush(bool urgent);
    // Return moved-from pages whose readers have finished to the hole list.
    void drain_pending_reuse();
    void set_latest_forward_done(CompletionTokenPtr token);
    // The forward just launched writes these virtual tokens until token completes.
    void set_inflight_forward(CompletionTokenPtr token, const index_t* virtual_tokens,
                              index_t count);

    // ---- move gate: pages under an in-flight transfer ----
    // Until token completes, the physical pages now holding these virtual
    // tokens are neither moved nor overwritten. A lazy side's flush leaves
    // them where they are, and once freed they are neither reused, moved into
    // nor given back to the gap; an allocation that needs them fails as out of
    // room. An eager free must compact at once: when its compaction reads or
    // writes a gated page, the plan carries a stream wait on the gate's token
    // (the move runs after the transfer, and so does every later launch on
    // the instance, so the gate is then settled). Where no stream wait can
    // order it (see set_stream_wait_check), such a free is refused with
    // invalid_state and changes nothing: deferring the compaction would leave
    // holes in an eager band, which must stay dense (the reference's eager
    // side has none, and a peer counts on the gap it gives back). Refused
    // inside a backup window (a restore would give the pages back).
    // skip_unbound gates only the ids still bound here (a pair's SWA side).
    // Misuse throws and changes nothing.
    void gate_transfer(CompletionTokenPtr token, const index_t* virtual_tokens, index_t count,
                       bool skip_unbound = false);
    // Throws what gate_transfer would throw for these arguments, changing
    // nothing: a composite checks every side before it gates any.
    void check_gate_transfer(const CompletionTokenPtr& token, const index_t* virtual_tokens,
                             index_t count, bool skip_unbound) const;
    // Physical pages under transfers not yet complete, ascending.
    std::vector<index_t> gated_pages() const;
    // Whether a token can order the device work of this side's plans without
    // blocking the host (an event token of the instance's GPU runtime); unset,
    // none can.
    using stream_wait_check = MoveGate::stream_wait_check;
    void set_stream_wait_check(stream_wait_check check) { gate_.set_stream_wait_check(check); }
    // Throws the invalid_state error an eager free of these tokens raises for
    // pages under a transfer no stream wait can order (the queued tokens of an
    // open free group with it), so a composite can check both sides before
    // freeing either. Ids that are not bound are left to the free to report.
    void check_free_gates(const index_t* virtual_tokens, index_t count) const;

    // ---- speculative decoding ----
    bool backup_window_open() const { return backup_.is_open(); }
    AllocatorSnapshot backup_state();
    // Throws invalid_state unless snapshot marks a point of the open window
    // still in the undo log (call names the caller in the message): a
    // composite checks every side before it restores or commits any.
    void check_snapshot(const AllocatorSnapshot& snapshot, const char* call) const;
    void restore_state(const AllocatorSnapshot& snapshot);
    // Keeps what was allocated since the snapshot; closes the window it opened.
    void commit_state(const AllocatorSnapshot& snapshot);

    void clear();

    // The byte account of the whole buffer, over this band's chain of neighbours.
    BufferBytes buffer_bytes() const;
    // Throws kvpool::Error(internal) naming the first broken invariant. Each
    // band checks the whole buffer's byte account too (one side alone may be checked).
    void check_invariants() const;
    std::string state_string() const override;
    // A 64-bit digest of every host table that decides this band's future
    // calls (detail::StateDigest): its geometry and options, the host mirror
    // of v2p and p2v, page states, free virtual ids and holes in their order,
    // the extent, the free group's queued tokens, pending batches, the
    // forward's write set, transfer gates and the backup window's undo log.
    // Tokens count only as set or not, never as complete; counters and the
    // device plan (empty between calls) are left out. Host only: no device
    // read, no fence. Equal on ranks that made the same calls.
    std::uint64_t state_digest() const;
    const AllocatorCounters& counters() const { return counters_; }

    DevicePlan& plan() { return plan_; }
    // A backend that can start page moves at once sets this for the length of
    // a flush, which calls it as soon as its moves are decided: the plan then
    // holds them (with any waits before them) but not yet their table writes.
    // The starter launches them and takes them out of the plan, so that the
    // copy overlaps the host mirror's bookkeeping that follows, or leaves them
    // there to go with the table writes. Only a flush starts moves early: they
    // go into holes and overwrite no page anyone holds, so a rollback after
    // them is still exact (an eager free's overwrite the freed pages). Unset,
    // moves wait for the whole plan.
    using move_starter = Compaction::move_starter;
    void set_move_starter(move_starter starter) {
        compaction_.set_move_starter(std::move(starter));
    }

    // Moved-from pages waiting for their readers, one batch per token, in the
    // order they return to the hole list.
    using PendingBatch = detail::PendingBatch;
    const std::vector<PendingBatch>& pending_batches() const {
        return compaction_.pending_batches();
    }

    // ---- transactions: undoing what the host decided when the device fails ----
    // While one is open every change is journaled. rollback_transaction()
    // restores the state at the opening (or at the last checkpoint) and drops
    // the device plan; close_transaction() keeps the changes. The device
    // tables are the caller's to restore: changed_rows() names their rows.
    void open_transaction();
    void checkpoint_transaction();
    void close_transaction();
    void rollback_transaction();
    bool transaction_open() const { return transaction_.is_open(); }
    using ChangedRows = detail::ChangedRows;
    // Rows of v2p and p2v changed since the opening or the last checkpoint.
    ChangedRows changed_rows() const { return transaction_.changed_rows(tables_); }

private:
    // Tests corrupt and repair the state through it to force internal errors.
    friend struct AllocatorCoreTestAccess;

    enum class ShortOfIds { flush_peer_first, fail_at_once };

    // The views the parts work through.
    Band band();
    BandView view() const;
    TransactionScope transaction_scope();
    using Unjournaled = TransactionLog::Unjournaled;

    index_t available_pages(index_t extra_below_bytes, index_t extra_above_bytes) const;
    // Bytes a neighbour can give this side's gap toward it: a lazy anchored
    // one's drainable holes, a floating one's shift.
    index_t neighbour_credit_bytes(const AllocatorCore* neighbour) const;
    // The band's page limits set by the neighbours' frontiers: pages below
    // the first one (resp. from the second one up) are theirs or the sink's.
    index_t lowest_free_page() const;
    index_t page_limit_above() const;
    bool alloc_pages(index_t num_pages, PageBinding& out, ShortOfIds short_of_ids);
    bool ensure_room(index_t num_pages);
    // Throws wrong_role on the id owner (alloc_with_virtual's check).
    void check_role_to_bind() const;
    // Whether the pages are ascending runs of unbound ids inside the table.
    bool virtual_runs_free(const PageRunList& virtual_pages) const;
    // The pages that cannot be bound (outside, bound, or repeated), one by one.
    std::vector<index_t> unbindable_pages(const PageRunList& virtual_pages);
    // Appends num_pages physical pages to out's, holes first, a run at a time.
    void take_physical(index_t num_pages, PageBinding& out);
    // A floating side's new pages past its holes, from the gaps on both sides.
    void extend_floating(index_t pages, PageRunList& out);
    // Writes the binding's pages into the host mirror, a paired run at a time.
    void bind(const PageBinding& binding);
    // The pages a free of these tokens frees, in the order it frees them,
    // written to *pages when given; throws what the free would throw.
    // Whether there is any.
    bool validated_pages(const index_t* virtual_tokens, index_t count, bool skip_unbound,
                         std::vector<index_t>* pages) const;
    // validated_pages' way for tokens in a few runs, each inside the id range
    // and bound: false, writing nothing, for anything else.
    bool pages_of_runs(const index_t* virtual_tokens, index_t count,
                       std::vector<index_t>* pages) const;
    void free_pages(const std::vector<index_t>& virtual_pages);
    [[noreturn]] void fail(const std::string& what) const override;

    SubPoolGeometry geometry_;
    index_t total_bytes_;
    AllocatorOptions options_;
    bool relocations_held_ = false;
    AllocatorCore* lower_ = nullptr;
    AllocatorCore* upper_ = nullptr;

    BandTables tables_;
    MoveGate gate_;
    Compaction compaction_;
    BackupWindow backup_;
    TransactionLog transaction_;

    bool in_free_group_ = false;
    JournaledDeque<index_t> free_group_tokens_;
    std::vector<index_t> freed_pages_; // free_tokens' pages, kept from call to call

    AllocatorCounters counters_;
    DevicePlan plan_;
    PageRunList bind_scratch_; // bind_virtual_pages' ids given as a list, as runs
};

// Pages that alloc_extend needs: for each request, pages covering seq_len that
// the prefix's pages do not cover.
index_t pages_needed_for_extend(const index_t* prefix_lens, const index_t* seq_lens, index_t batch,
                                index_t page_size);
// Whether a decode's token, the seq_len-th of its request (seq_len >= 1),
// starts a page. One mask, or one division where the page size is no power of
// two: a decode batch asks this of every request.
inline bool decode_opens_page(index_t seq_len, index_t page_size) {
    const index_t offset = seq_len - 1;
    return (page_size & (page_size - 1)) == 0 ? (offset & (page_size - 1)) == 0
                                              : offset % page_size == 0;
}

} // namespace detail
} // namespace kvpool
