// The marker backup_state() returns (speculative decoding).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvpool {

// Opaque marker of the state at backup_state(); restore_state() undoes every
// allocation made since.
struct AllocatorSnapshot {
    std::uint64_t window_id = 0; // unique across allocators, so a foreign one is refused
    std::size_t undo_depth = 0;
    // Serial of the newest undo record at the snapshot (0: none). A restore to
    // an outer snapshot, then new allocations, would reach this depth with other
    // records: the serial tells a stale inner snapshot apart.
    std::uint64_t last_record = 0;
    bool opened_window = false; // false inside an enclosing window
};

} // namespace kvpool
