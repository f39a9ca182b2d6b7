// How one side of a unified buffer behaves: compaction mode, id ownership,
// the opportunistic flush cap and handout zeroing.
#pragma once

#include <kvpool/types.hpp>

namespace kvpool {

struct AllocatorOptions {
    CompactionMode mode = CompactionMode::eager;
    // The id owner mints virtual ids; a non-owner binds ids minted by its peer.
    bool is_id_owner = true;
    // Moves one opportunistic (non-urgent) flush may make; urgent flushes pack fully.
    index_t max_moves_per_flush = 4096;
    // Handout zeroing: every page this side hands out (alloc, alloc_extend,
    // alloc_decode, alloc_with_virtual, state slots, and as a pair's follower)
    // has all its bytes zeroed in the alloc-bind launch, so that no stale
    // bytes of an earlier owner reach the engine. Tokens handed out in a
    // request's partly filled last page are not zeroed again (the page was
    // zeroed when it was new). Pages that compaction moves keep their
    // contents. Off by default: SGLang's allocator zeroes nothing (its Mamba
    // slots are cleared by the engine, clear_slots, on the forward stream).
    bool zero_on_alloc = false;
};

} // namespace kvpool
