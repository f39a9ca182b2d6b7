// A list of page ids held as runs: an allocation's pages come from runs of
// free ids and from the band's frontier, so a prefill's 16,384 pages are a few
// runs, and taking, checking, binding and logging them costs per run. Only
// scattered pages (drained holes) cost a run each. Host only.
#pragma once

#include <kvpool/detail/id_runs.hpp>
#include <kvpool/types.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <iterator>
#include <vector>

namespace kvpool::detail {

// The ids first, first + step, ..., count of them; step is +1, or -1 for a
// band growing down past drained holes (a run of one id steps +1).
struct SteppedRun {
    index_t first, count, step;
    index_t at(index_t k) const { return first + k * step; }
};

class PageRunList {
public:
    // The ids in order, one at a time (for per-page readers of scattered
    // bindings and the tests).
    using const_iterator = RunIdIterator<std::vector<SteppedRun>>;

    std::size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    const std::vector<SteppedRun>& runs() const { return runs_; }
    const_iterator begin() const { return {&runs_, 0}; }
    const_iterator end() const { return {&runs_, runs_.size()}; }
    index_t front() const { return runs_.front().first; }
    // The k-th id: a walk over the runs (tests and error paths).
    index_t operator[](std::size_t k) const {
        for (const SteppedRun& r : runs_) {
            if (k < static_cast<std::size_t>(r.count))
                return r.at(static_cast<index_t>(k));
            k -= static_cast<std::size_t>(r.count);
        }
        return unbound;
    }

    void clear() {
        runs_.clear();
        size_ = 0;
    }
    void push_back(index_t id) {
        ++size_;
        if (!runs_.empty()) {
            SteppedRun& last = runs_.back();
            if (id == last.at(last.count)) {
                ++last.count;
                return;
            }
            if (last.count == 1 && id == last.first - 1) {
                last.count = 2;
                last.step = -1;
                return;
            }
        }
        runs_.push_back({id, 1, 1});
    }
    // Appends first, first + 1, ..., first + count - 1.
    void append_run(index_t first, index_t count) {
        if (count <= 1) {
            if (count == 1)
                push_back(first);
            return;
        }
        size_ += static_cast<std::size_t>(count);
        if (!runs_.empty() && runs_.back().step == 1 &&
            runs_.back().first + runs_.back().count == first)
            runs_.back().count += count;
        else
            runs_.push_back({first, count, 1});
    }
    // Appends first, first - 1, ..., first - count + 1.
    void append_descending(index_t first, index_t count) {
        if (count <= 1) {
            if (count == 1)
                push_back(first);
            return;
        }
        size_ += static_cast<std::size_t>(count);
        runs_.push_back({first, count, -1});
    }
    // The n ids from ids on, a run at a time.
    void assign(const index_t* ids, std::size_t n) {
        clear();
        for_each_run(ids, n, [&](std::size_t i, std::size_t count) {
            append_run(ids[i], static_cast<index_t>(count));
        });
    }
    // Appends the ids to out, a run at a time.
    void append_to(std::vector<index_t>& out) const {
        const std::size_t at = out.size();
        out.resize(at + size_);
        index_t* dst = out.data() + at;
        for (const SteppedRun& r : runs_)
            for (index_t k = 0; k < r.count; ++k)
                *dst++ = r.at(k);
    }
    std::vector<index_t> to_vector() const {
        std::vector<index_t> out;
        append_to(out);
        return out;
    }

private:
    std::vector<SteppedRun> runs_;
    std::size_t size_ = 0;
};

// As append_run on a list (JournaledRuns::take_front writes either).
inline void append_run(PageRunList& ids, index_t first, index_t count) {
    ids.append_run(first, count);
}

// Calls f(firsts, count) for each maximal stretch of positions where every
// list (all of one length) goes up by one from id to id, firsts[i] being list
// i's id at the stretch's start: the paired runs a binding's pages come in.
// Per run of the lists, but per id inside a descending run.
template <std::size_t N, class F>
void for_each_joint_run(const std::array<const PageRunList*, N>& lists, const F& f) {
    std::array<std::size_t, N> run{};
    std::array<index_t, N> offset{};
    std::array<index_t, N> pending_first{};
    index_t pending = 0;
    const auto emit = [&](const std::array<index_t, N>& firsts, index_t count) {
        bool continues = pending > 0;
        for (std::size_t i = 0; i < N && continues; ++i)
            continues = firsts[i] == pending_first[i] + pending;
        if (continues) {
            pending += count;
            return;
        }
        if (pending > 0)
            f(pending_first, pending);
        pending_first = firsts;
        pending = count;
    };
    const std::size_t runs = lists[0]->runs().size();
    while (run[0] < runs) {
        index_t length = 0;
        bool ascending = true;
        for (std::size_t i = 0; i < N; ++i) {
            const SteppedRun& r = lists[i]->runs()[run[i]];
            const index_t left = r.count - offset[i];
            length = i == 0 ? left : std::min(length, left);
            ascending = ascending && r.step == 1;
        }
        const index_t pieces = ascending ? 1 : length;
        const index_t piece = ascending ? length : 1;
        for (index_t k = 0; k < pieces; ++k) {
            std::array<index_t, N> firsts;
            for (std::size_t i = 0; i < N; ++i)
                firsts[i] = lists[i]->runs()[run[i]].at(offset[i] + k);
            emit(firsts, piece);
        }
        for (std::size_t i = 0; i < N; ++i)
            if ((offset[i] += length) == lists[i]->runs()[run[i]].count) {
                ++run[i];
                offset[i] = 0;
            }
    }
    if (pending > 0)
        f(pending_first, pending);
}

// The paired runs of a binding: f(virtual_first, physical_first, count).
template <class F>
void for_each_paired_run(const PageRunList& virtual_pages, const PageRunList& physical_pages,
                         const F& f) {
    for_each_joint_run<2>({&virtual_pages, &physical_pages},
                          [&](const std::array<index_t, 2>& firsts, index_t count) {
                              f(firsts[0], firsts[1], count);
                          });
}

} // namespace kvpool::detail
