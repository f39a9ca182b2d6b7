// Small helpers the allocator core's sources share: page arithmetic and the
// way an error message lists ids.
#pragma once

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

// The ids value, value + 1, ... as a forward iterator, so that a list takes a
// run of ids in one insert (no zero fill before it is written).
class IdCounter {
public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = index_t;
    using difference_type = std::ptrdiff_t;
    using pointer = const index_t*;
    using reference = index_t;

    explicit IdCounter(index_t value) : value_(value) {}
    index_t operator*() const { return value_; }
    IdCounter& operator++() {
        ++value_;
        return *this;
    }
    IdCounter operator++(int) {
        IdCounter was = *this;
        ++value_;
        return was;
    }
    bool operator==(const IdCounter& o) const { return value_ == o.value_; }
    bool operator!=(const IdCounter& o) const { return value_ != o.value_; }

private:
    index_t value_;
};

// Appends the run first, first + 1, ..., first + count - 1 to ids.
inline void append_run(std::vector<index_t>& ids, index_t first, index_t count) {
    ids.insert(ids.end(), IdCounter(first), IdCounter(first + count));
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
