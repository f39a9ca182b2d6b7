// The backup window of speculative decoding: backup_state() opens it, every
// allocation inside it is logged for undo, restore_state() takes them back to
// a snapshot and commit_state() keeps them. No relocation or free happens
// inside a window (the core refuses them), so undoing the allocations in
// reverse restores the band exactly.
#pragma once

#include <kvpool/allocator_snapshot.hpp>
#include <kvpool/detail/core/band_tables.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace kvpool::detail {

class BackupWindow {
public:
    bool is_open() const { return window_id_ != 0; }
    // Opens a window if none is open; a snapshot of the point reached.
    AllocatorSnapshot backup();
    // Logs an allocation for undo while a window is open.
    void log(const PageBinding& binding, bool from_free_list);
    // Drops the newest logged allocation (it was taken back another way).
    void drop_last() { undo_log_.edit().pop_back(); }
    // Throws invalid_state unless snapshot marks a point of the open window
    // still in the undo log; call names the caller in the message.
    void check(const AllocatorSnapshot& snapshot, const char* call, const std::string& name,
               const BandReport& report) const;
    // Undoes, newest first, every allocation logged since the snapshot.
    void restore(const Band& band, const AllocatorSnapshot& snapshot);
    // Keeps what was allocated since the snapshot; closes the window it opened.
    void commit(const Band& band, const AllocatorSnapshot& snapshot);

    void clear() {
        window_id_ = 0;
        undo_log_.edit().clear();
    }

    // The scalars a transaction restores.
    struct Saved {
        std::uint64_t window_id, next_serial;
    };
    Saved saved() const { return {window_id_, next_serial_}; }
    void restore_saved(const Saved& s) {
        window_id_ = s.window_id;
        next_serial_ = s.next_serial;
    }
    template <class F> void for_each_journal(const F& f) { f(undo_log_); }
    // Whether a window is open (not its id: ids are unique in the process, so
    // two ranks' differ) and the undo log, serials included.
    void add_to(StateDigest& digest) const;

private:
    // An allocation's binding, its pages held as runs (a prefill's thousands
    // of pages are a few), so that logging and a transaction's copy of the
    // log cost per run, not per page.
    struct UndoRecord {
        PageBinding binding;
        bool virtual_pages_from_free_list;
        std::uint64_t serial;
    };

    std::uint64_t window_id_ = 0; // 0: no backup window open
    JournaledValue<std::vector<UndoRecord>> undo_log_;
    std::uint64_t next_serial_ = 1;
};

} // namespace kvpool::detail
