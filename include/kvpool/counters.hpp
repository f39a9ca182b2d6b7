#pragma once

#include <kvpool/types.hpp>

namespace kvpool {

// Cumulative observability counters of one sub-allocator (kept across clear()).
struct AllocatorCounters {
    index_t allocs = 0;        // calls that allocated at least one page
    index_t failed_allocs = 0; // calls answered with "no allocation"
    index_t frees = 0;         // free calls that released at least one page
    index_t pages_allocated = 0;
    index_t pages_freed = 0;
    index_t pages_moved = 0; // compaction moves (eager and lazy)
    index_t bytes_moved = 0;
    index_t flushes = 0;        // lazy flush calls that did any work
    index_t pages_absorbed = 0; // lazy holes retired at the frontier without a move
    index_t holes_peak = 0;     // most lazy holes seen at once
    index_t shifts = 0;         // band shifts that made room for a neighbour (floating sides)
};

} // namespace kvpool
