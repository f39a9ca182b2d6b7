// Runs of ids: written into lists (the ids of a run as an iterator) and
// recognised in them.
#pragma once

#include <kvpool/types.hpp>

#include <cstddef>
#include <iterator>
#include <vector>

namespace kvpool::detail {

// The ids value, value + 1, ... as an iterator, so that a list takes a run of
// ids in one insert (no zero fill before it is written); random access, so
// that the insert knows its length at once and its copy loop vectorises.
class IdCounter {
public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = index_t;
    using difference_type = std::ptrdiff_t;
    using pointer = const index_t*;
    using reference = index_t;

    explicit IdCounter(index_t value) : value_(value) {}
    index_t operator*() const { return value_; }
    index_t operator[](difference_type n) const { return value_ + n; }
    IdCounter& operator++() {
        ++value_;
        return *this;
    }
    IdCounter operator++(int) {
        IdCounter was = *this;
        ++value_;
        return was;
    }
    IdCounter& operator--() {
        --value_;
        return *this;
    }
    IdCounter& operator+=(difference_type n) {
        value_ += n;
        return *this;
    }
    IdCounter operator+(difference_type n) const { return IdCounter(value_ + n); }
    IdCounter operator-(difference_type n) const { return IdCounter(value_ - n); }
    difference_type operator-(const IdCounter& o) const { return value_ - o.value_; }
    bool operator==(const IdCounter& o) const { return value_ == o.value_; }
    bool operator!=(const IdCounter& o) const { return value_ != o.value_; }
    bool operator<(const IdCounter& o) const { return value_ < o.value_; }

private:
    index_t value_;
};

// Appends the run first, first + 1, ..., first + count - 1 to ids.
inline void append_run(std::vector<index_t>& ids, index_t first, index_t count) {
    ids.insert(ids.end(), IdCounter(first), IdCounter(first + count));
}

// Whether ids[k] == ids[0] + k for every k: an OR of differences, which
// compilers vectorise, where a loop that stops at the first miss is scalar.
inline bool consecutive(const index_t* ids, std::size_t n) {
    index_t differs = 0;
    for (std::size_t k = 0; k < n; ++k)
        differs |= ids[k] ^ (ids[0] + static_cast<index_t>(k));
    return differs == 0;
}

} // namespace kvpool::detail
