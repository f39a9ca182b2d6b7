// Undo journals for the host control plane's containers. While a journal is
// open, every change is logged so that rollback() puts back exactly what was
// there, at a cost proportional to the changes made, not to the container:
// a device failure after the host has decided is undone this way (see
// AllocatorCore::rollback_transaction). Closed, the containers log nothing.
#pragma once

#include <kvpool/detail/id_runs.hpp>
#include <kvpool/types.hpp>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

namespace kvpool::detail {

// Opening, closing and suspending a journal; Derived drops what it logged
// in checkpoint().
template <class Derived> class JournalSwitch {
public:
    void open() {
        open_ = true;
        static_cast<Derived&>(*this).checkpoint();
    }
    void close() {
        static_cast<Derived&>(*this).checkpoint();
        open_ = false;
    }
    // Stops logging for a change that is undone another way (and resumes).
    bool suspend() {
        const bool was_open = open_;
        open_ = false;
        return was_open;
    }
    void resume(bool was_open) { open_ = was_open; }

protected:
    bool open_ = false;
};

// What the table and the queue journals share: the log of changes since
// the opening or the last checkpoint, and a copy of the whole container
// taken before a rebuild (once). Derived undoes one entry at a time.
template <class Derived, class Entry, class Items> class Journal : public JournalSwitch<Derived> {
public:
    // Keeps the changes; logging goes on from here while open.
    void checkpoint() {
        log_.clear();
        saved_.reset();
    }
    void rollback() {
        auto& self = static_cast<Derived&>(*this);
        self.undo_down_to(saved_ ? saved_->first : log_.size());
        if (saved_)
            self.items_ = std::move(saved_->second);
        self.undo_down_to(0);
        saved_.reset();
    }

protected:
    void log(const Entry& e) {
        if (this->open_)
            log_.push_back(e);
    }
    // Before a rebuild: the container moves into the saved copy (the
    // rebuild replaces it anyway); false when nothing was saved. A second
    // rebuild first undoes what was logged since the save, against the
    // contents it was logged on: a rollback restores the saved copy anyway,
    // and those entries would not fit the rebuilt contents.
    bool save(Items& items) {
        if (!this->open_)
            return false;
        if (saved_) {
            static_cast<Derived&>(*this).undo_down_to(saved_->first);
            return false;
        }
        saved_.emplace(log_.size(), std::move(items));
        return true;
    }

    std::vector<Entry> log_;
    std::optional<std::pair<std::size_t, Items>> saved_;
};

template <class T> struct TableEntry {
    std::size_t index;
    T old;
};

// A fixed-size table written entry by entry; whole reassignments (clear())
// save a copy.
template <class T>
class JournaledTable : public Journal<JournaledTable<T>, TableEntry<T>, std::vector<T>> {
    using Base = Journal<JournaledTable<T>, TableEntry<T>, std::vector<T>>;
    friend Base;

public:
    const T& operator[](std::size_t i) const { return items_[i]; }
    std::size_t size() const { return items_.size(); }
    const T* data() const { return items_.data(); }

    void set(std::size_t i, T value) {
        this->log({i, items_[i]});
        items_[i] = value;
    }
    // Before a batch of changes at these n entries (in any order, repeats
    // allowed): while open, records the stretches of the table they fall in,
    // one copy each, so that set_unlogged may then change them; a flush that
    // moves thousands of pages journals them with a few copies instead of an
    // entry per change. False, recording nothing, when the entries are too
    // scattered for stretches to pay: set must log each change then.
    bool save_stretches(const index_t* indices, std::size_t n) {
        if (!this->open_ || n == 0)
            return true;
        // A run of pages either way (a flush's survivors, a request's pages):
        // its one stretch, found by a vectorised check.
        const index_t span = indices[n - 1] - indices[0];
        if ((span == static_cast<index_t>(n) - 1 && consecutive(indices, n)) ||
            (span == 1 - static_cast<index_t>(n) && consecutive_down(indices, n))) {
            const auto lo = static_cast<std::size_t>(std::min(indices[0], indices[n - 1]));
            save_stretch(lo, lo + n);
            return true;
        }
        const std::size_t most = n / 4 + 1;
        found_.clear();
        auto lo = static_cast<std::size_t>(indices[0]), hi = lo;
        for (std::size_t k = 1; k < n; ++k) {
            const auto i = static_cast<std::size_t>(indices[k]);
            if (i + stretch_gap >= lo && i <= hi + stretch_gap) {
                lo = std::min(lo, i);
                hi = std::max(hi, i);
                continue;
            }
            if (found_.size() + 1 == most)
                return false;
            found_.emplace_back(lo, hi);
            lo = hi = i;
        }
        found_.emplace_back(lo, hi);
        for (const auto& [first, last] : found_)
            save_stretch(first, last + 1);
        return true;
    }
    // Entries [first, last) set to value, journaled as one stretch.
    void fill(std::size_t first, std::size_t last, T value) {
        if (first >= last)
            return;
        if (this->open_)
            save_stretch(first, last);
        std::fill(items_.begin() + static_cast<std::ptrdiff_t>(first),
                  items_.begin() + static_cast<std::ptrdiff_t>(last), value);
    }
    // Entries [first, first + n) set to start, start + step, ... (a run of
    // pages bound; step +1 or -1), journaled as one stretch.
    void set_run(std::size_t first, std::size_t n, T start, T step) {
        if (n == 0)
            return;
        if (this->open_)
            save_stretch(first, first + n);
        // An induction (a value stepped, no multiply): compilers vectorise it.
        T* const items = items_.data() + first;
        T value = start;
        for (std::size_t k = 0; k < n; ++k, value += step)
            items[k] = value;
    }
    // Entry i, which save_stretches covered since the opening or the last
    // checkpoint (or the journal is closed).
    void set_unlogged(std::size_t i, T value) { items_[i] = value; }
    // Entries first, first + step, ... (count of them, step +1 or -1) set to
    // value_of(0), value_of(1), ..., likewise covered: a loop over adjacent
    // entries, which compilers vectorise.
    template <class ValueOf>
    void set_stretch_unlogged(std::size_t first, index_t step, std::size_t count,
                              const ValueOf& value_of) {
        if (step > 0) {
            T* const items = items_.data() + first;
            for (std::size_t k = 0; k < count; ++k)
                items[k] = static_cast<T>(value_of(k));
        } else {
            T* const items = items_.data() + (first + 1 - count);
            for (std::size_t k = 0; k < count; ++k)
                items[k] = static_cast<T>(value_of(count - 1 - k));
        }
    }
    // n entries at once, entry index_of(k) set to value_of(k): a prefill binds
    // thousands, and closed the loop has no branch to take per entry.
    template <class IndexOf, class ValueOf>
    void set_each(std::size_t n, const IndexOf& index_of, const ValueOf& value_of) {
        if (this->open_) {
            for (std::size_t k = 0; k < n; ++k)
                set(index_of(k), value_of(k));
            return;
        }
        T* const items = items_.data();
        for (std::size_t k = 0; k < n; ++k)
            items[index_of(k)] = value_of(k);
    }
    void assign(std::size_t n, T value) {
        if (this->save(items_))
            items_ = std::vector<T>(n, value);
        else
            items_.assign(n, value);
    }

    void checkpoint() {
        Base::checkpoint();
        stretches_.clear();
    }

    // Whether the whole table was reassigned since the opening or checkpoint.
    bool all_changed() const { return this->saved_.has_value(); }
    // Entries changed since the opening or the last checkpoint, with repeats
    // (every entry of a saved stretch counts as changed).
    template <class F> void for_each_changed(const F& f) const {
        for (const TableEntry<T>& e : this->log_)
            if (e.index != stretch_mark)
                f(e.index);
        for (const Stretch& s : stretches_)
            for (std::size_t k = 0; k < s.old.size(); ++k)
                f(s.first + k);
    }

private:
    // A stretch's place in the log is an entry with this index: undoing
    // entries and stretches in one reverse order puts back what was there.
    static constexpr std::size_t stretch_mark = ~std::size_t(0);
    // Entries this close to a stretch join it rather than start another.
    static constexpr std::size_t stretch_gap = 16;
    struct Stretch {
        std::size_t first;
        std::vector<T> old;
    };

    void save_stretch(std::size_t first, std::size_t last) {
        stretches_.push_back(
            {first, std::vector<T>(items_.begin() + static_cast<std::ptrdiff_t>(first),
                                   items_.begin() + static_cast<std::ptrdiff_t>(last))});
        this->log_.push_back({stretch_mark, T{}});
    }

    void undo_down_to(std::size_t end) {
        while (this->log_.size() > end) {
            const TableEntry<T>& e = this->log_.back();
            if (e.index == stretch_mark) {
                const Stretch& s = stretches_.back();
                std::copy(s.old.begin(), s.old.end(),
                          items_.begin() + static_cast<std::ptrdiff_t>(s.first));
                stretches_.pop_back();
            } else {
                items_[e.index] = e.old;
            }
            this->log_.pop_back();
        }
    }

    std::vector<T> items_;
    std::vector<Stretch> stretches_;
    std::vector<std::pair<std::size_t, std::size_t>> found_; // save_stretches' scratch
};

enum class QueueChange {
    pushed_back,
    pushed_back_many,
    pushed_front,
    pushed_front_many,
    inserted,
    erased
};
template <class T> struct QueueEntry {
    QueueChange kind;
    std::size_t position;
    T value;
};

// A queue of ids changed at both ends and, rarely, in the middle.
template <class T>
class JournaledDeque : public Journal<JournaledDeque<T>, QueueEntry<T>, std::deque<T>> {
    using Base = Journal<JournaledDeque<T>, QueueEntry<T>, std::deque<T>>;
    friend Base;

public:
    using const_iterator = typename std::deque<T>::const_iterator;
    const std::deque<T>& items() const { return items_; }
    std::size_t size() const { return items_.size(); }
    bool empty() const { return items_.empty(); }
    const_iterator begin() const { return items_.begin(); }
    const_iterator end() const { return items_.end(); }
    const T& operator[](std::size_t i) const { return items_[i]; }

    void push_back(T value) {
        this->log({QueueChange::pushed_back, 0, value});
        items_.push_back(value);
    }
    void push_front(T value) {
        this->log({QueueChange::pushed_front, 0, value});
        items_.push_front(value);
    }
    // Inserts [first, last) before the front, in order; journaled as one
    // entry (its position field holds the count).
    template <class It> void insert_front(It first, It last) {
        const auto count = static_cast<std::size_t>(std::distance(first, last));
        if (count == 0)
            return;
        this->log({QueueChange::pushed_front_many, count, T{}});
        items_.insert(items_.begin(), first, last);
    }
    // Appends [first, last), in order; journaled as one entry.
    template <class It> void insert_back(It first, It last) {
        const auto count = static_cast<std::size_t>(std::distance(first, last));
        if (count == 0)
            return;
        this->log({QueueChange::pushed_back_many, count, T{}});
        items_.insert(items_.end(), first, last);
    }
    // Appends the run first, first + 1, ..., first + count - 1 (a freed run
    // of ids or pages) without a list of it; journaled as one entry.
    void insert_back_run(T first, std::size_t count) {
        if (count == 0)
            return;
        this->log({QueueChange::pushed_back_many, count, T{}});
        items_.insert(items_.end(), IdCounter(first), IdCounter(first + static_cast<T>(count)));
    }
    // Inserts value before position i.
    void insert_at(std::size_t i, T value) {
        this->log({QueueChange::inserted, i, value});
        items_.insert(items_.begin() + static_cast<std::ptrdiff_t>(i), value);
    }
    // Removes the entry at position i.
    void erase_at(std::size_t i) {
        this->log({QueueChange::erased, i, items_[i]});
        items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    void erase_back(std::size_t n) {
        for (std::size_t k = 0; k < n; ++k) {
            this->log({QueueChange::erased, items_.size() - 1, items_.back()});
            items_.pop_back();
        }
    }
    void erase_front(std::size_t n) {
        if (!this->open_) {
            items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(n));
            return;
        }
        for (std::size_t k = 0; k < n; ++k) {
            this->log({QueueChange::erased, 0, items_.front()});
            items_.pop_front();
        }
    }
    // Replaces everything (a whole rebuild: the old contents are kept once).
    template <class It> void assign(It first, It last) {
        if (this->save(items_))
            items_ = std::deque<T>(first, last);
        else
            items_.assign(first, last);
    }
    void clear() {
        if (this->save(items_))
            items_ = std::deque<T>();
        else
            items_.clear();
    }

private:
    void undo_down_to(std::size_t end) {
        while (this->log_.size() > end) {
            const QueueEntry<T> e = this->log_.back();
            this->log_.pop_back();
            switch (e.kind) {
            case QueueChange::pushed_back:
                items_.pop_back();
                break;
            case QueueChange::pushed_back_many:
                items_.erase(items_.end() - static_cast<std::ptrdiff_t>(e.position), items_.end());
                break;
            case QueueChange::pushed_front:
                items_.pop_front();
                break;
            case QueueChange::pushed_front_many:
                items_.erase(items_.begin(),
                             items_.begin() + static_cast<std::ptrdiff_t>(e.position));
                break;
            case QueueChange::inserted:
                items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(e.position));
                break;
            case QueueChange::erased:
                items_.insert(items_.begin() + static_cast<std::ptrdiff_t>(e.position), e.value);
                break;
            }
        }
    }

    std::deque<T> items_;
};

// A run of ids: first, first + 1, ..., first + count - 1.
template <class T> struct IdRun {
    T first;
    T count;
    T at(T k) const { return first + k; }
};
// A queue of distinct ids held as runs, so that taking or returning a run of
// n ids costs O(runs), not O(n). Neighbouring runs never continue each other
// (one id sequence has one run list), and the ids read in order are exactly
// what a deque of single ids would hold.
template <class T> struct RunList {
    std::deque<IdRun<T>> runs;
    std::size_t ids = 0;
};
enum class RunChange { pushed_back, pushed_front, erased_back, erased_front };
template <class T> struct RunEntry {
    RunChange kind;
    T first; // erased: the run taken off, to put back
    T count;
};

// The free-id queue: ids handed out from the front, returned at either end.
// Every change logs one entry a run it touches.
template <class T> class JournaledRuns : public Journal<JournaledRuns<T>, RunEntry<T>, RunList<T>> {
    using Base = Journal<JournaledRuns<T>, RunEntry<T>, RunList<T>>;
    friend Base;

public:
    // The ids in order, one at a time.
    using const_iterator = RunIdIterator<std::deque<IdRun<T>>>;

    std::size_t size() const { return items_.ids; }
    bool empty() const { return items_.ids == 0; }
    const std::deque<IdRun<T>>& runs() const { return items_.runs; }
    const_iterator begin() const { return {&items_.runs, 0}; }
    const_iterator end() const { return {&items_.runs, items_.runs.size()}; }
    T front() const { return items_.runs.front().first; }

    // Appends the first n ids to out (a list, or a PageRunList: a run at a
    // time) and takes them off (n <= size()).
    template <class Out> void take_front(std::size_t n, Out& out) {
        pop_ids<front_end>(n, [&](T first, T k) {
            append_run(out, first, k);
            this->log({RunChange::erased_front, first, k});
        });
    }
    void erase_back(std::size_t n) {
        pop_ids<back_end>(n, [&](T first, T k) { this->log({RunChange::erased_back, first, k}); });
    }
    // Appends first, first + 1, ..., first + count - 1.
    void insert_back_run(T first, std::size_t count) {
        if (count == 0)
            return;
        this->log({RunChange::pushed_back, T{}, static_cast<T>(count)});
        push_back(first, static_cast<T>(count));
    }
    // Appends [first, last), in order, a run at a time.
    void insert_back(const T* first, const T* last) {
        if (first == last)
            return;
        this->log({RunChange::pushed_back, T{}, static_cast<T>(last - first)});
        each_run(first, last, [&](T start, T count) { push_back(start, count); });
    }
    // Inserts [first, last) before the front, in order.
    void insert_front(const T* first, const T* last) {
        std::vector<IdRun<T>> pieces;
        each_run(first, last, [&](T start, T count) { pieces.push_back({start, count}); });
        insert_front_runs(pieces);
    }
    // Inserts the ids of pieces (runs of ids going up) before the front, in
    // order, a run at a time.
    void insert_front_runs(const std::vector<IdRun<T>>& pieces) {
        T ids = 0;
        for (const IdRun<T>& piece : pieces)
            ids += piece.count;
        if (ids == 0)
            return;
        this->log({RunChange::pushed_front, T{}, ids});
        for (auto it = pieces.rbegin(); it != pieces.rend(); ++it)
            push_front(it->first, it->count);
    }
    // Empties the queue (a whole rebuild: the old contents are kept once).
    void clear() {
        this->save(items_);
        items_ = RunList<T>();
    }

private:
    // f(start, count) for each maximal run of [first, last) (for_each_run's).
    template <class F> static void each_run(const T* first, const T* last, const F& f) {
        for_each_run(first, static_cast<std::size_t>(last - first),
                     [&](std::size_t i, std::size_t count) { f(first[i], static_cast<T>(count)); });
    }
    void push_back(T first, T count) {
        auto& runs = items_.runs;
        if (!runs.empty() && runs.back().first + runs.back().count == first)
            runs.back().count += count;
        else
            runs.push_back({first, count});
        items_.ids += static_cast<std::size_t>(count);
    }
    void push_front(T first, T count) {
        auto& runs = items_.runs;
        if (!runs.empty() && first + count == runs.front().first) {
            runs.front().first = first;
            runs.front().count += count;
        } else {
            runs.push_front({first, count});
        }
        items_.ids += static_cast<std::size_t>(count);
    }
    enum End { front_end, back_end };
    // n ids off one end, a run at a time: each(first, k) sees the k ids
    // first, first + 1, ... of a run before they go.
    template <End end, class F> void pop_ids(std::size_t n, const F& each) {
        auto& runs = items_.runs;
        items_.ids -= n;
        while (n > 0) {
            IdRun<T>& r = end == front_end ? runs.front() : runs.back();
            const auto k = static_cast<T>(std::min(n, static_cast<std::size_t>(r.count)));
            each(end == front_end ? r.first : r.first + r.count - k, k);
            if (end == front_end)
                r.first += k;
            r.count -= k;
            if (r.count == 0 && end == front_end)
                runs.pop_front();
            else if (r.count == 0)
                runs.pop_back();
            n -= static_cast<std::size_t>(k);
        }
    }

    void undo_down_to(std::size_t end) {
        while (this->log_.size() > end) {
            const RunEntry<T> e = this->log_.back();
            this->log_.pop_back();
            switch (e.kind) {
            case RunChange::pushed_back:
                pop_ids<back_end>(static_cast<std::size_t>(e.count), [](T, T) {});
                break;
            case RunChange::pushed_front:
                pop_ids<front_end>(static_cast<std::size_t>(e.count), [](T, T) {});
                break;
            case RunChange::erased_back:
                push_back(e.first, e.count);
                break;
            case RunChange::erased_front:
                push_front(e.first, e.count);
                break;
            }
        }
    }

    RunList<T> items_;
};

// Any other value (a small vector, a struct of counters): copied once, on its
// first change while open.
template <class T> class JournaledValue : public JournalSwitch<JournaledValue<T>> {
public:
    const T& get() const { return value_; }
    T& edit() {
        if (this->open_ && !saved_)
            saved_ = value_;
        return value_;
    }

    void checkpoint() { saved_.reset(); }
    void rollback() {
        if (saved_)
            value_ = std::move(*saved_);
        saved_.reset();
    }

private:
    T value_{};
    std::optional<T> saved_;
};

} // namespace kvpool::detail
