// The marker backup_state() returns (speculative decoding).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvpool {

// Opaque marker of the state at backup_state(); restore_state() undoes every
// allocation made since.
struct AllocatorSnapshot {
    std::uint64_t window_id = 0;
    std::size_t undo_depth = 0;
    bool opened_window = false; // false inside an enclosing window
};

} // namespace kvpool
