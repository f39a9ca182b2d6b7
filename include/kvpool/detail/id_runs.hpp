// Runs of ids: written into lists (the ids of a run as an iterator) and
// recognised in them.
#pragma once

#include <kvpool/types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>
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

// The ids of a sequence of runs, one at a time: Runs is a random-access
// container of runs, each with a count and at(k), its k-th id.
template <class Runs> class RunIdIterator {
    using run_type = typename Runs::value_type;

public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::decay_t<decltype(std::declval<const run_type&>().count)>;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = value_type;

    RunIdIterator() = default;
    RunIdIterator(const Runs* runs, std::size_t run) : runs_(runs), run_(run) {}
    value_type operator*() const { return (*runs_)[run_].at(offset_); }
    RunIdIterator& operator++() {
        if (++offset_ == (*runs_)[run_].count) {
            ++run_;
            offset_ = 0;
        }
        return *this;
    }
    RunIdIterator operator++(int) {
        RunIdIterator was = *this;
        ++*this;
        return was;
    }
    // n ids on, a run at a time.
    RunIdIterator operator+(std::size_t n) const {
        RunIdIterator it = *this;
        while (n > 0) {
            const auto left = static_cast<std::size_t>((*runs_)[it.run_].count - it.offset_);
            if (n < left) {
                it.offset_ += static_cast<value_type>(n);
                break;
            }
            n -= left;
            ++it.run_;
            it.offset_ = 0;
        }
        return it;
    }
    bool operator==(const RunIdIterator& o) const { return run_ == o.run_ && offset_ == o.offset_; }
    bool operator!=(const RunIdIterator& o) const { return !(*this == o); }

private:
    const Runs* runs_ = nullptr;
    std::size_t run_ = 0;
    value_type offset_ = 0;
};

// Appends the run first, first + 1, ..., first + count - 1 to ids.
inline void append_run(std::vector<index_t>& ids, index_t first, index_t count) {
    ids.insert(ids.end(), IdCounter(first), IdCounter(first + count));
}

// An id as unsigned: differences and steps of a caller's wildest ids wrap
// instead of overflowing (a range check on the run then refuses them).
inline std::uint64_t unsigned_id(index_t id) {
    return static_cast<std::uint64_t>(id);
}

// Whether ids[k] == ids[0] + k for every k: an OR of differences, which
// compilers vectorise, where a loop that stops at the first miss is scalar.
inline bool consecutive(const index_t* ids, std::size_t n) {
    std::uint64_t differs = 0;
    for (std::size_t k = 0; k < n; ++k)
        differs |= unsigned_id(ids[k]) ^ (unsigned_id(ids[0]) + k);
    return differs == 0;
}
// Whether ids[k] == ids[0] - k for every k (a run read backwards).
inline bool consecutive_down(const index_t* ids, std::size_t n) {
    std::uint64_t differs = 0;
    for (std::size_t k = 0; k < n; ++k)
        differs |= unsigned_id(ids[k]) ^ (unsigned_id(ids[0]) - k);
    return differs == 0;
}

// Calls f(i, count) for each maximal stretch ids[i, i + count) that goes up
// by one from entry to entry: the runs a request's pages come in. A list
// that is one run (its ends say so before a vectorised check) is one call.
// Ids compare as unsigned, so any ids are safe to walk (a stretch may wrap
// from the largest id to the smallest: f range-checks what it takes). f
// returns nothing, or false to stop the walk; returns whether it finished.
template <class F> bool for_each_run(const index_t* ids, std::size_t n, const F& f) {
    const auto take = [&](std::size_t i, std::size_t count) {
        if constexpr (std::is_void_v<std::invoke_result_t<const F&, std::size_t, std::size_t>>) {
            f(i, count);
            return true;
        } else {
            return static_cast<bool>(f(i, count));
        }
    };
    if (n == 0)
        return true;
    if (unsigned_id(ids[n - 1]) - unsigned_id(ids[0]) == n - 1 && consecutive(ids, n))
        return take(0, n);
    std::size_t first = 0;
    for (std::size_t k = 1; k <= n; ++k)
        if (k == n || unsigned_id(ids[k]) != unsigned_id(ids[k - 1]) + 1) {
            if (!take(first, k - first))
                return false;
            first = k;
        }
    return true;
}

// Calls f(i, count, step) for each maximal stretch ids[i, i + count) that
// goes up (step 1) or down (step -1) by one from entry to entry (a single
// id: step 1). A list that is one stretch either way is one call, found by
// a vectorised check.
template <class F> void for_each_stepped_run(const index_t* ids, std::size_t n, const F& f) {
    if (n == 0)
        return;
    const index_t span = ids[n - 1] - ids[0];
    if (span == static_cast<index_t>(n) - 1 && consecutive(ids, n)) {
        f(std::size_t(0), n, index_t(1));
        return;
    }
    if (span == 1 - static_cast<index_t>(n) && consecutive_down(ids, n)) {
        f(std::size_t(0), n, index_t(-1));
        return;
    }
    std::size_t first = 0;
    index_t step = 0; // of the stretch from first: 0 while it holds one entry
    for (std::size_t k = 1; k <= n; ++k) {
        const index_t d = k < n ? ids[k] - ids[k - 1] : 0;
        if (k < n && (d == 1 || d == -1) && (step == 0 || d == step)) {
            step = d;
            continue;
        }
        f(first, k - first, step < 0 ? index_t(-1) : index_t(1));
        first = k;
        step = 0;
    }
}

// Calls f(lowest, count) for each maximal stretch of ids that goes up or
// down by one from entry to entry: the rows [lowest, lowest + count) it
// covers, whatever the order (a band that grows down binds a request's
// pages in descending order, so its pages are runs read backwards).
template <class F> void for_each_row_range(const index_t* ids, std::size_t n, const F& f) {
    for_each_stepped_run(ids, n, [&](std::size_t i, std::size_t count, index_t step) {
        f(step < 0 ? ids[i + count - 1] : ids[i], count);
    });
}

} // namespace kvpool::detail
