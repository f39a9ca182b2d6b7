#include <kvpool/detail/core/transaction_log.hpp>

#include <algorithm>

namespace kvpool::detail {

TransactionLog::Scalars TransactionLog::scalars(const TransactionScope& scope) {
    return {scope.tables.watermark,   scope.tables.anchor, scope.tables.live_pages,
            scope.compaction.saved(), scope.in_free_group, scope.relocations_held,
            scope.backup.saved(),     scope.counters};
}

TransactionLog::Unjournaled::Unjournaled(const TransactionScope& scope, bool active)
    : scope_(scope), active_(active) {
    unsigned bit = 1;
    if (active_)
        scope_.for_each_journal([&](auto& j) {
            was_open_ |= j.suspend() ? bit : 0u;
            bit <<= 1;
        });
}

TransactionLog::Unjournaled::~Unjournaled() {
    if (!active_)
        return;
    unsigned bit = 1;
    scope_.for_each_journal([&](auto& j) {
        j.resume((was_open_ & bit) != 0);
        bit <<= 1;
    });
}

bool TransactionLog::take_allocation(const PageBinding& binding, bool from_free_list,
                                     bool logged_undo) {
    if (!open_ || allocation_.binding != nullptr || free_.applied)
        return false;
    allocation_ = {&binding, from_free_list, logged_undo};
    return true;
}

const std::vector<index_t>& TransactionLog::begin_free(const BandTables& tables,
                                                       const std::vector<index_t>& virtual_pages) {
    // The lists are cleared, not replaced: they keep their room from call to call.
    free_.recording = true;
    free_.applied = false;
    free_.virtual_pages.assign(virtual_pages.begin(), virtual_pages.end());
    free_.physical_pages.clear();
    tables.append_physical(virtual_pages.data(), virtual_pages.size(), free_.physical_pages);
    CompactionRecord& c = free_.compaction;
    c.moved_virtual.clear();
    c.move_src.clear();
    c.move_dst.clear();
    c.gates_before.reset();
    return free_.physical_pages;
}

void TransactionLog::undo_free(const TransactionScope& scope, const Free& f) {
    BandTables& t = scope.tables;
    const CompactionRecord& c = f.compaction;
    if (c.gates_before)
        scope.gate.restore(*c.gates_before);
    if (scope.options.is_id_owner)
        t.free_virtual_pages.erase_back(f.virtual_pages.size());
    if (scope.options.mode == CompactionMode::lazy)
        t.holes.erase_back(f.virtual_pages.size());
    for (std::size_t i = c.move_src.size(); i-- > 0;) {
        t.v2p.set(c.moved_virtual[i], c.move_src[i]);
        t.p2v.set(c.move_src[i], c.moved_virtual[i]);
        t.page_state.set(c.move_src[i], PageState::live);
    }
    for (std::size_t i = 0; i < f.virtual_pages.size(); ++i) {
        t.v2p.set(f.virtual_pages[i], f.physical_pages[i]);
        t.p2v.set(f.physical_pages[i], f.virtual_pages[i]);
        t.page_state.set(f.physical_pages[i], PageState::live);
    }
}

void TransactionLog::open(const TransactionScope& scope) {
    scope.for_each_journal([](auto& j) { j.open(); });
    saved_ = scalars(scope);
    allocation_ = {};
    free_.applied = false;
    open_ = true;
}

void TransactionLog::checkpoint(const TransactionScope& scope) {
    scope.for_each_journal([](auto& j) { j.checkpoint(); });
    saved_ = scalars(scope);
    allocation_ = {};
    free_.applied = false;
}

void TransactionLog::close(const TransactionScope& scope) {
    scope.for_each_journal([](auto& j) { j.close(); });
    saved_ = {};
    allocation_ = {};
    free_.applied = false;
    open_ = false;
}

void TransactionLog::rollback(const TransactionScope& scope) {
    if (const PageBinding* binding = allocation_.binding) {
        const Unjournaled quiet(scope, true);
        if (allocation_.logged_undo)
            scope.backup.drop_last();
        scope.tables.undo_binding(*binding, allocation_.from_free_list, scope.plan);
        allocation_ = {};
    }
    if (free_.applied) {
        const Unjournaled quiet(scope, true);
        undo_free(scope, free_);
        free_.applied = false;
    }
    scope.for_each_journal([](auto& j) { j.rollback(); });
    const Scalars& s = saved_;
    scope.tables.watermark = s.watermark;
    scope.tables.anchor = s.anchor;
    scope.tables.live_pages = s.live_pages;
    scope.compaction.restore_saved(s.compaction);
    scope.in_free_group = s.in_free_group;
    scope.relocations_held = s.relocations_held;
    scope.backup.restore_saved(s.backup);
    scope.counters = s.counters;
    scope.plan.clear();
    close(scope);
}

ChangedRows TransactionLog::changed_rows(const BandTables& tables) const {
    ChangedRows rows;
    rows.all = tables.v2p.all_changed() || tables.p2v.all_changed();
    tables.v2p.for_each_changed(
        [&](std::size_t i) { rows.v2p.push_back(static_cast<index_t>(i)); });
    tables.p2v.for_each_changed(
        [&](std::size_t i) { rows.p2v.push_back(static_cast<index_t>(i)); });
    if (free_.applied) {
        const Free& f = free_;
        const CompactionRecord& c = f.compaction;
        rows.v2p.insert(rows.v2p.end(), f.virtual_pages.begin(), f.virtual_pages.end());
        rows.v2p.insert(rows.v2p.end(), c.moved_virtual.begin(), c.moved_virtual.end());
        rows.p2v.insert(rows.p2v.end(), f.physical_pages.begin(), f.physical_pages.end());
        rows.p2v.insert(rows.p2v.end(), c.move_src.begin(), c.move_src.end());
    }
    if (const PageBinding* binding = allocation_.binding) {
        rows.v2p.insert(rows.v2p.end(), binding->virtual_pages.begin(),
                        binding->virtual_pages.end());
        rows.p2v.insert(rows.p2v.end(), binding->physical_pages.begin(),
                        binding->physical_pages.end());
    }
    for (auto* r : {&rows.v2p, &rows.p2v}) {
        std::sort(r->begin(), r->end());
        r->erase(std::unique(r->begin(), r->end()), r->end());
    }
    return rows;
}

} // namespace kvpool::detail
