// Shared by the move gate's tests: token lists without some tokens.
#pragma once

#include <kvpool/types.hpp>

#include <algorithm>
#include <vector>

namespace kvpool::test {

// v without the tokens in gone, in v's order.
inline std::vector<index_t> without(const std::vector<index_t>& v,
                                    const std::vector<index_t>& gone) {
    std::vector<index_t> kept;
    for (index_t t : v)
        if (std::find(gone.begin(), gone.end(), t) == gone.end())
            kept.push_back(t);
    return kept;
}

} // namespace kvpool::test
