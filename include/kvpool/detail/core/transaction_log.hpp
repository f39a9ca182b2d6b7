// The transaction log: undoing what the host decided when the device fails.
// While a transaction is open every change to the band's tables and the
// parts' journaled state is journaled, and the scalars are saved at its
// opening (or last checkpoint); a rollback puts all of it back. The first
// allocation or free of a transaction goes unjournaled instead (a prefill
// binds thousands of pages) and is undone from its own record.
#pragma once

#include <kvpool/counters.hpp>
#include <kvpool/detail/core/backup_window.hpp>
#include <kvpool/detail/core/band_tables.hpp>
#include <kvpool/detail/core/compaction.hpp>
#include <kvpool/detail/core/move_gate.hpp>

#include <vector>

namespace kvpool::detail {

// Rows of v2p and p2v a transaction changed, for the caller to restore on the device.
struct ChangedRows {
    bool all = false; // the tables were rebuilt (clear())
    std::vector<index_t> v2p;
    std::vector<index_t> p2v;
};

// What a transaction journals and restores: the band's tables, the parts'
// state and the core's own (the free group, held relocations, counters).
struct TransactionScope {
    const AllocatorOptions& options;
    BandTables& tables;
    Compaction& compaction;
    MoveGate& gate;
    BackupWindow& backup;
    JournaledDeque<index_t>& free_group_tokens;
    bool& in_free_group;
    bool& relocations_held;
    AllocatorCounters& counters;
    DevicePlan& plan;

    template <class F> void for_each_journal(const F& f) const {
        f(tables.free_virtual_pages);
        f(tables.v2p);
        f(tables.p2v);
        f(tables.page_state);
        f(tables.holes);
        compaction.for_each_journal(f);
        gate.for_each_journal(f);
        f(free_group_tokens);
        backup.for_each_journal(f);
    }
};

class TransactionLog {
public:
    bool is_open() const { return open_; }
    void open(const TransactionScope& scope);
    void checkpoint(const TransactionScope& scope);
    void close(const TransactionScope& scope);
    // Restores the state at the opening (or the last checkpoint), drops the
    // device plan and closes the transaction.
    void rollback(const TransactionScope& scope);
    // Rows of v2p and p2v changed since the opening or the last checkpoint.
    ChangedRows changed_rows(const BandTables& tables) const;

    // Whether the allocation about to fill binding goes unjournaled, recorded
    // as the transaction's allocation (one per transaction, and none after its
    // free); logged_undo: a backup window logs it too.
    bool take_allocation(const PageBinding& binding, bool from_free_list, bool logged_undo);
    bool is_allocation(const PageBinding& binding) const { return allocation_.binding == &binding; }
    // The allocation was taken back another way.
    void drop_allocation() { allocation_ = {}; }

    // Whether the free about to happen goes unjournaled: the transaction's
    // first, with no unjournaled allocation before it. begin_free() then
    // records the pages and where they are (and returns the latter, for the
    // free), free_record() takes what the compaction did, and end_free()
    // marks the free applied.
    bool takes_free() const { return open_ && !free_.applied && allocation_.binding == nullptr; }
    const std::vector<index_t>& begin_free(const BandTables& tables,
                                           const std::vector<index_t>& virtual_pages);
    CompactionRecord* free_record() { return free_.recording ? &free_.compaction : nullptr; }
    void end_free() {
        free_.recording = false;
        free_.applied = true;
    }

    // Journals suspended for its lifetime when active.
    class Unjournaled {
    public:
        Unjournaled(const TransactionScope& scope, bool active);
        ~Unjournaled();
        Unjournaled(const Unjournaled&) = delete;
        Unjournaled& operator=(const Unjournaled&) = delete;

    private:
        TransactionScope scope_;
        bool active_;
        unsigned was_open_ = 0; // a bit per journal
    };

private:
    // The scalars a transaction restores, as they were at its opening.
    struct Scalars {
        index_t watermark, anchor, live_pages;
        Compaction::Saved compaction;
        bool in_free_group, relocations_held;
        BackupWindow::Saved backup;
        AllocatorCounters counters;
    };
    static Scalars scalars(const TransactionScope& scope);

    struct Allocation {
        const PageBinding* binding = nullptr;
        bool from_free_list = false;
        bool logged_undo = false;
    };
    // The free: the pages it freed and where they were, and what its
    // compaction did. It goes unjournaled only as the core's last change in
    // the transaction (the calls end with it), so that rollback may undo it
    // before the journal.
    struct Free {
        bool recording = false;
        bool applied = false;
        std::vector<index_t> virtual_pages, physical_pages;
        CompactionRecord compaction;
    };
    static void undo_free(const TransactionScope& scope, const Free& f);

    bool open_ = false;
    Scalars saved_{};
    Allocation allocation_;
    Free free_;
};

} // namespace kvpool::detail
