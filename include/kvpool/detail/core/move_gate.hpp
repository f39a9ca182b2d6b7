// The move gate: physical pages under an in-flight transfer, which no
// compaction may move or overwrite until the transfer's token completes (see
// AllocatorCore::gate_transfer for the contract).
#pragma once

#include <kvpool/completion_token.hpp>
#include <kvpool/detail/core/band_tables.hpp>

#include <optional>
#include <vector>

namespace kvpool::detail {

class MoveGate {
public:
    // Pages an in-flight transfer reads until done completes.
    struct Gate {
        CompletionTokenPtr done;
        std::vector<index_t> pages;
    };
    using stream_wait_check = bool (*)(const CompletionToken&);

    // Whether a token can order a plan's device work without blocking the host.
    void set_stream_wait_check(stream_wait_check check) { stream_wait_check_ = check; }

    // The physical pages now holding these virtual tokens, ascending, once
    // each: what gate_transfer would gate. Throws, changing nothing, on a
    // missing token, inside a backup window, or on ids not allocated (unless
    // skip_unbound).
    std::vector<index_t> pages_of(const BandView& band, const CompletionTokenPtr& token,
                                  const index_t* virtual_tokens, index_t count, bool skip_unbound,
                                  bool window_open) const;
    // Holds pages until token completes (nothing, if it has); completed gates are dropped.
    void add(CompletionTokenPtr token, std::vector<index_t> pages);

    bool empty() const { return gates_.get().empty(); }
    // Physical pages under transfers not yet complete, ascending.
    std::vector<index_t> gated_pages() const;
    // Holes an allocation may reuse: those under no transfer.
    index_t usable_holes(const BandTables& tables) const;

    // The tokens an eager free of these (bound) virtual pages must wait for
    // on the stream: its compaction overwrites every freed page and reads the
    // frontier pages it vacates. Throws invalid_state when a gate it touches
    // cannot be waited for on the stream.
    std::vector<CompletionTokenPtr>
    eager_free_waits(const BandView& band, const std::vector<index_t>& virtual_pages) const;
    // Drops the gates that are complete or that these waits settle; returns
    // the gates as they were when asked to keep them and any was dropped.
    std::optional<std::vector<Gate>> settle(const std::vector<CompletionTokenPtr>& waits,
                                            bool keep_before);
    // Drops the gates whose transfers are complete.
    void drop_complete();
    // Puts back gates that settle() returned.
    void restore(const std::vector<Gate>& gates) { gates_.edit() = gates; }

    void clear() { gates_.edit().clear(); }
    template <class F> void for_each_journal(const F& f) { f(gates_); }
    // Each gate's pages, in gate order; of its token, only that it has one
    // (whether it completed is the device's timing, not state).
    void add_to(StateDigest& digest) const;

private:
    // Completed ones are dropped by the next flush, eager free or gate.
    JournaledValue<std::vector<Gate>> gates_;
    stream_wait_check stream_wait_check_ = nullptr;
};

} // namespace kvpool::detail
