#include <kvpool/detail/core/backup_window.hpp>
#include <kvpool/detail/state_digest.hpp>
#include <kvpool/error.hpp>

#include <fmt/format.h>

#include <atomic>

namespace kvpool::detail {

AllocatorSnapshot BackupWindow::backup() {
    // Window ids are unique in the process: a snapshot of another allocator
    // never matches this one's open window.
    static std::atomic<std::uint64_t> next_window_id{1};
    const bool opens = window_id_ == 0;
    if (opens) {
        window_id_ = next_window_id.fetch_add(1);
        undo_log_.edit().clear();
    }
    const std::vector<UndoRecord>& log = undo_log_.get();
    return {window_id_, log.size(), log.empty() ? 0 : log.back().serial, opens};
}

void BackupWindow::log(const PageBinding& binding, bool from_free_list) {
    if (window_id_ == 0)
        return;
    undo_log_.edit().push_back({binding, from_free_list, next_serial_++});
}

void BackupWindow::check(const AllocatorSnapshot& snapshot, const char* call,
                         const std::string& name, const BandReport& report) const {
    const std::size_t depth = snapshot.undo_depth;
    const std::vector<UndoRecord>& log = undo_log_.get();
    const bool valid =
        snapshot.window_id != 0 && snapshot.window_id == window_id_ && depth <= log.size() &&
        (depth == 0 ? snapshot.last_record == 0 : log[depth - 1].serial == snapshot.last_record);
    if (!valid)
        throw Error(ErrorCode::invalid_state,
                    fmt::format("{}: {} with a snapshot that is not of the open backup window, "
                                "or that an earlier restore made stale. State: {}",
                                name, call, report.state_string()));
}

void BackupWindow::commit(const Band& band, const AllocatorSnapshot& snapshot) {
    check(snapshot, "commit_state", band.geometry.spec.name, band.report);
    // An enclosing window still needs the records to undo.
    if (snapshot.opened_window) {
        window_id_ = 0;
        undo_log_.edit().clear();
    }
}

void BackupWindow::restore(const Band& band, const AllocatorSnapshot& snapshot) {
    check(snapshot, "restore_state", band.geometry.spec.name, band.report);
    while (undo_log_.get().size() > snapshot.undo_depth) {
        const UndoRecord r = std::move(undo_log_.edit().back());
        undo_log_.edit().pop_back();
        band.tables.undo_binding(r.binding, r.virtual_pages_from_free_list, band.plan);
    }
    if (snapshot.opened_window)
        window_id_ = 0;
}

void BackupWindow::add_to(StateDigest& digest) const {
    digest.add_bool(is_open());
    digest.add(next_serial_);
    const std::vector<UndoRecord>& log = undo_log_.get();
    digest.add(log.size());
    for (const UndoRecord& r : log) {
        digest.add_range(r.binding.virtual_pages.to_vector());
        digest.add_range(r.binding.physical_pages.to_vector());
        digest.add(r.binding.drained_holes);
        digest.add_range(r.binding.hole_positions);
        digest.add_signed(r.binding.watermark_before);
        digest.add_signed(r.binding.anchor_before);
        digest.add_bool(r.virtual_pages_from_free_list);
        digest.add(r.serial);
    }
}

} // namespace kvpool::detail
