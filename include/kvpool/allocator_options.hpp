// How one side of a unified buffer behaves: compaction mode, id ownership and
// the opportunistic flush cap.
#pragma once

#include <kvpool/types.hpp>

namespace kvpool {

struct AllocatorOptions {
    CompactionMode mode = CompactionMode::eager;
    // The id owner mints virtual ids; a non-owner binds ids minted by its peer.
    bool is_id_owner = true;
    // Moves one opportunistic (non-urgent) flush may make; urgent flushes pack fully.
    index_t max_moves_per_flush = 4096;
};

} // namespace kvpool
