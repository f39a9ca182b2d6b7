// Small helpers the allocator core's sources share: page arithmetic and the
// way an error message lists ids.
#pragma once

#include <kvpool/detail/id_runs.hpp>
#include <kvpool/types.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string>
#include <vector>

namespace kvpool::detail {

inline index_t ceil_div(index_t a, index_t b) {
    return (a + b - 1) / b;
}

// At most this many ids are named in an error message.
constexpr std::size_t max_ids_in_message = 8;

inline std::string first_ids(const std::vector<index_t>& ids) {
    std::vector<index_t> head(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                             ids.size(), max_ids_in_message)));
    return ids.size() > max_ids_in_message
               ? fmt::format("{} (and {} more)", head, ids.size() - max_ids_in_message)
               : fmt::format("{}", head);
}

} // namespace kvpool::detail
