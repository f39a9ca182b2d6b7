// Undo journals for the host control plane's containers. While a journal is
// open, every change is logged so that rollback() puts back exactly what was
// there, at a cost proportional to the changes made, not to the container:
// a device failure after the host has decided is undone this way (see
// AllocatorCore::rollback_transaction). Closed, the containers log nothing.
#pragma once

#include <kvpool/types.hpp>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <iterator>
#include <numeric>
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
    // rebuild replaces it anyway); false when nothing was saved.
    bool save(Items& items) {
        if (!this->open_ || saved_)
            return false;
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
    // Entries [first, first + n) set to start, start + 1, ... (a run of
    // pages bound), journaled as one stretch.
    void set_run(std::size_t first, std::size_t n, T start) {
        if (n == 0)
            return;
        if (this->open_)
            save_stretch(first, first + n);
        T* const items = items_.data() + first;
        std::iota(items, items + n, start);
    }
    // Entry i, which save_stretches covered since the opening or the last
    // checkpoint (or the journal is closed).
    void set_unlogged(std::size_t i, T value) { items_[i] = value; }
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
        const std::size_t at = items_.size();
        items_.resize(at + count);
        std::iota(items_.begin() + static_cast<std::ptrdiff_t>(at), items_.end(), first);
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
