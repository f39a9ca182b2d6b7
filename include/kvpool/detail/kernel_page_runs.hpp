// A binding's joint runs as the alloc-bind kernels take them by value, from
// the run lists themselves: what the table executor hands a launch, and what
// the kernel tests build their runs with.
#pragma once

#include <kvpool/detail/page_run_list.hpp>
#include <kvpool/kernels/page_runs.hpp>

#include <array>

namespace kvpool::detail {

// The joint runs of the virtual, physical and follower pages (lists of one
// length; the physical list again for no follower: the runs stay the same),
// each list with its own direction; count 0 when there are more than
// PageRuns::max_runs (the pages go as lists then).
inline kernels::PageRuns kernel_page_runs(const std::array<const PageRunList*, 3>& lists) {
    kernels::PageRuns runs;
    index_t at = 0;
    bool too_many = false;
    for_each_joint_run(lists, [&](const std::array<SteppedRun, 3>& joint) {
        too_many = too_many || runs.count == kernels::PageRuns::max_runs;
        if (!too_many) {
            const int j = runs.count++;
            runs.first[j] = at;
            runs.virtual_start[j] = joint[0].first;
            runs.physical_start[j] = joint[1].first;
            runs.follower_start[j] = joint[2].first;
            runs.virtual_down[j] = joint[0].step < 0;
            runs.physical_down[j] = joint[1].step < 0;
            runs.follower_down[j] = joint[2].step < 0;
        }
        at += joint[0].count;
    });
    if (too_many)
        return kernels::PageRuns{};
    runs.pages = at;
    return runs;
}

} // namespace kvpool::detail
