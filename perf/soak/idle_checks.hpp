// After teardown a side must be back where it started: nothing live, no
// holes, nothing awaiting reuse, every id free, its band and gap as when it
// was made, and every page it ever allocated freed again.
#pragma once

#include <kvpool/multi_ended_allocator.hpp>

#include <string>
#include <vector>

namespace kvpool::soak {

template <class ExecutionSpace>
void check_idle(const MultiEndedAllocator<ExecutionSpace>& side, const AllocatorOccupancy& at_start,
                std::vector<std::string>& failures) {
    const AllocatorOccupancy o = side.occupancy();
    const AllocatorCounters& c = side.counters();
    const std::string name = side.geometry().spec.name;
    const auto expect = [&](const char* what, index_t got, index_t idle) {
        if (got != idle)
            failures.push_back("after teardown, side " + name + ": " + what + " is " +
                               std::to_string(got) + ", not " + std::to_string(idle));
    };
    expect("allocated tokens", side.allocated_count(), 0);
    expect("live pages", o.live_pages, 0);
    expect("hole pages", o.hole_pages, 0);
    expect("pages awaiting reuse", o.pending_reuse_pages, 0);
    expect("free virtual pages", o.free_virtual_pages, side.geometry().page_capacity());
    expect("watermark", o.watermark, at_start.watermark);
    expect("gap bytes", o.gap_bytes, at_start.gap_bytes);
    expect("pages freed (cumulative)", c.pages_freed, c.pages_allocated);
}

} // namespace kvpool::soak
