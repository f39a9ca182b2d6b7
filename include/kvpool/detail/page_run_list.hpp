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
#include <utility>
#include <vector>

namespace kvpool::detail {

// The ids first, first + step, ..., count of them; step is +1, or -1 for a
// band growing down past drained holes (a run of one id steps +1).
struct SteppedRun {
    index_t first, count, step;
    index_t at(index_t k) const { return first + k * step; }
    // The lowest id: the run's ids are the rows [low(), low() + count).
    index_t low() const { return step == 1 ? first : first - count + 1; }
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
        if (append_short(first, count))
            return;
        size_ += static_cast<std::size_t>(count);
        if (!runs_.empty() && runs_.back().step == 1 &&
            runs_.back().first + runs_.back().count == first)
            runs_.back().count += count;
        else
            runs_.push_back({first, count, 1});
    }
    // Appends first, first - 1, ..., first - count + 1.
    void append_descending(index_t first, index_t count) {
        if (append_short(first, count))
            return;
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
    // A run of at most one id, as push_back appends it: true, else false.
    bool append_short(index_t first, index_t count) {
        if (count > 1)
            return false;
        if (count == 1)
            push_back(first);
        return true;
    }

    std::vector<SteppedRun> runs_;
    std::size_t size_ = 0;
};

// As append_run on a list (JournaledRuns::take_front writes either).
inline void append_run(PageRunList& ids, index_t first, index_t count) {
    ids.append_run(first, count);
}

// Whether run b, following run a, goes on with it as one run (a run of one id
// takes whichever step joins it), and then the joined run in a.
inline bool join_runs(SteppedRun& a, const SteppedRun& b) {
    const index_t step = a.count > 1 ? a.step : b.count > 1 ? b.step : b.first - a.first;
    if ((step != 1 && step != -1) || (b.count > 1 && b.step != step) ||
        b.first != a.first + a.count * step)
        return false;
    a = {a.first, a.count + b.count, step};
    return true;
}

// Calls f(runs) for each maximal stretch of positions where every list (all
// of one length) steps by +1 or by -1 from id to id, runs[i] being list i's
// ids over the stretch (all of one count): the joint runs a binding's pages
// come in, whichever way each band grows. Per run of the lists.
template <std::size_t N, class F>
void for_each_joint_run(const std::array<const PageRunList*, N>& lists, const F& f) {
    std::array<std::size_t, N> run{};
    std::array<index_t, N> offset{};
    std::array<SteppedRun, N> pending{};
    const auto joins_all = [](std::array<SteppedRun, N>& into,
                              const std::array<SteppedRun, N>& next) {
        std::array<SteppedRun, N> joined = into;
        bool joins = into[0].count > 0;
        for (std::size_t i = 0; i < N && joins; ++i)
            joins = join_runs(joined[i], next[i]);
        if (joins)
            into = joined;
        return joins;
    };
    const std::size_t runs = lists[0]->runs().size();
    while (run[0] < runs) {
        index_t length = 0;
        for (std::size_t i = 0; i < N; ++i) {
            const index_t left = lists[i]->runs()[run[i]].count - offset[i];
            length = i == 0 ? left : std::min(length, left);
        }
        std::array<SteppedRun, N> piece;
        for (std::size_t i = 0; i < N; ++i) {
            const SteppedRun& r = lists[i]->runs()[run[i]];
            piece[i] = {r.at(offset[i]), length, r.step};
            if ((offset[i] += length) == r.count) {
                ++run[i];
                offset[i] = 0;
            }
        }
        // The whole piece joins the pending run, or its first ids alone (a
        // run turning round), or it starts the next run: the stretches are
        // the maximal ones a walk id by id finds, and so the fewest.
        if (joins_all(pending, piece))
            continue;
        if (length > 1) {
            std::array<SteppedRun, N> head = piece;
            for (SteppedRun& r : head)
                r.count = 1;
            if (joins_all(pending, head)) {
                for (SteppedRun& r : piece)
                    r = {r.at(1), length - 1, r.step};
            }
        }
        if (pending[0].count > 0)
            f(std::as_const(pending));
        pending = piece;
    }
    if (pending[0].count > 0)
        f(std::as_const(pending));
}

// The paired runs of a binding: f(virtual_run, physical_run), of one count.
template <class F>
void for_each_paired_run(const PageRunList& virtual_pages, const PageRunList& physical_pages,
                         const F& f) {
    for_each_joint_run<2>({&virtual_pages, &physical_pages},
                          [&](const std::array<SteppedRun, 2>& runs) { f(runs[0], runs[1]); });
}

} // namespace kvpool::detail
