// Where one side of a unified buffer stands, in pages and bytes: what a
// capacity planner (kvpool-sim's admission check) reads to tell whether
// pages on both sides can be had at once. A snapshot, taken on the host.
#pragma once

#include <kvpool/types.hpp>

namespace kvpool {

struct SideOccupancy {
    index_t free_virtual_pages = 0; // pages the side's id space (its cap) still admits
    index_t hole_pages = 0;         // lazy mode: freed pages awaiting reuse or a flush
    index_t gap_bytes = 0;          // between this side's frontier and the peer's
    index_t page_bytes = 0;
};

} // namespace kvpool
