// Where one MultiEndedAllocator (a side) of a unified buffer stands, in pages
// and bytes: what a capacity planner (kvpool-sim's admission check) reads to
// tell whether pages on both sides can be had at once, and what the C API
// reports of a side's state. A snapshot, taken on the host.
#pragma once

#include <kvpool/types.hpp>

namespace kvpool {

struct AllocatorOccupancy {
    index_t free_virtual_pages = 0; // pages the side's id space (its cap) still admits
    index_t hole_pages = 0;         // lazy mode: freed pages awaiting reuse or a flush
    index_t gap_bytes = 0;          // between this side's frontier and the peer's
    index_t page_bytes = 0;
    index_t watermark = 0;           // physical pages the side's band spans
    index_t live_pages = 0;          // physical pages bound to a virtual page
    index_t pending_reuse_pages = 0; // lazy mode: freed pages held until their forward is done
};

} // namespace kvpool
