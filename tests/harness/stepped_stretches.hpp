// The model the run tests check run finders against: lists of one length
// walked position by position.
#pragma once

#include <kvpool/types.hpp>

#include <cstddef>
#include <vector>

namespace kvpool::test {

// A stretch of positions [first, first + count) and each list's step in it
// (+1 for a stretch of one position, whose step means nothing).
struct SteppedStretch {
    std::size_t first = 0;
    std::size_t count = 0;
    std::vector<index_t> steps;
    bool operator==(const SteppedStretch& o) const {
        return first == o.first && count == o.count && steps == o.steps;
    }
};

// The maximal stretches of positions where every list steps by +1 or by -1
// (each its own way, set at a stretch's second position) from entry to
// entry, found by walking the lists position by position.
inline std::vector<SteppedStretch>
stepped_stretches(const std::vector<const std::vector<index_t>*>& lists) {
    std::vector<SteppedStretch> stretches;
    const std::size_t n = lists.empty() ? 0 : lists[0]->size();
    std::vector<index_t> steps(lists.size(), 1);
    std::size_t first = 0;
    for (std::size_t k = 1; k <= n; ++k) {
        bool goes_on = k < n;
        for (std::size_t i = 0; i < lists.size() && goes_on; ++i) {
            const index_t d = (*lists[i])[k] - (*lists[i])[k - 1];
            goes_on = k - first == 1 ? d == 1 || d == -1 : d == steps[i];
        }
        if (goes_on) {
            if (k - first == 1)
                for (std::size_t i = 0; i < lists.size(); ++i)
                    steps[i] = (*lists[i])[k] - (*lists[i])[k - 1];
            continue;
        }
        stretches.push_back({first, k - first, steps});
        first = k;
        steps.assign(lists.size(), 1);
    }
    return stretches;
}

} // namespace kvpool::test
