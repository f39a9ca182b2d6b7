// Undo journals for the host control plane's containers. While a journal is
// open, every change is logged so that rollback() puts back exactly what was
// there, at a cost proportional to the changes made, not to the container:
// a device failure after the host has decided is undone this way (see
// AllocatorCore::rollback_transaction). Closed, the containers log nothing.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

namespace kvpool::detail {

// A fixed-size table written entry by entry; whole reassignments (clear())
// save a copy.
template <class T> class JournaledTable {
public:
    const T& operator[](std::size_t i) const { return items_[i]; }
    std::size_t size() const { return items_.size(); }

    void set(std::size_t i, T value) {
        if (open_)
            log_.push_back({i, items_[i]});
        items_[i] = value;
    }
    void assign(std::size_t n, T value) {
        if (open_ && !saved_)
            saved_ = {log_.size(), items_};
        items_.assign(n, value);
    }

    void open() {
        open_ = true;
        log_.clear();
        saved_.reset();
    }
    // Keeps the changes; logging goes on from here while open.
    void checkpoint() {
        log_.clear();
        saved_.reset();
    }
    void close() {
        checkpoint();
        open_ = false;
    }
    void rollback() {
        const std::size_t saved_at = saved_ ? saved_->first : log_.size();
        undo_down_to(saved_at);
        if (saved_)
            items_ = std::move(saved_->second);
        undo_down_to(0);
        saved_.reset();
    }
    // Entries changed since the journal was opened or checkpointed, with
    // repeats; all() when the whole table was reassigned.
    bool all_changed() const { return saved_.has_value(); }
    template <class F> void for_each_changed(const F& f) const {
        for (const Entry& e : log_)
            f(e.index);
    }

private:
    struct Entry {
        std::size_t index;
        T old;
    };
    void undo_down_to(std::size_t end) {
        while (log_.size() > end) {
            items_[log_.back().index] = log_.back().old;
            log_.pop_back();
        }
    }

    std::vector<T> items_;
    bool open_ = false;
    std::vector<Entry> log_;
    std::optional<std::pair<std::size_t, std::vector<T>>> saved_;
};

// A queue of ids changed at both ends and, rarely, in the middle.
template <class T> class JournaledDeque {
public:
    using const_iterator = typename std::deque<T>::const_iterator;
    const std::deque<T>& items() const { return items_; }
    std::size_t size() const { return items_.size(); }
    bool empty() const { return items_.empty(); }
    const_iterator begin() const { return items_.begin(); }
    const_iterator end() const { return items_.end(); }
    const T& operator[](std::size_t i) const { return items_[i]; }

    void push_back(T value) {
        log({Kind::pushed_back, 0, value});
        items_.push_back(value);
    }
    void push_front(T value) {
        log({Kind::pushed_front, 0, value});
        items_.push_front(value);
    }
    // Inserts [first, last) before the front, in order.
    template <class It> void insert_front(It first, It last) {
        for (It it = last; it != first;)
            push_front(*--it);
    }
    template <class It> void insert_back(It first, It last) {
        for (It it = first; it != last; ++it)
            push_back(*it);
    }
    // Removes the entry at position i.
    void erase_at(std::size_t i) {
        log({Kind::erased, i, items_[i]});
        items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    void erase_front(std::size_t n) {
        for (std::size_t k = 0; k < n; ++k)
            erase_at(0);
    }
    // Replaces everything (a whole rebuild: saves a copy once).
    template <class It> void assign(It first, It last) {
        save();
        items_.assign(first, last);
    }
    void clear() {
        save();
        items_.clear();
    }

    void open() {
        open_ = true;
        log_.clear();
        saved_.reset();
    }
    void checkpoint() {
        log_.clear();
        saved_.reset();
    }
    void close() {
        checkpoint();
        open_ = false;
    }
    void rollback() {
        const std::size_t saved_at = saved_ ? saved_->first : log_.size();
        undo_down_to(saved_at);
        if (saved_)
            items_ = std::move(saved_->second);
        undo_down_to(0);
        saved_.reset();
    }

private:
    enum class Kind { pushed_back, pushed_front, erased };
    struct Entry {
        Kind kind;
        std::size_t position;
        T value;
    };
    void log(const Entry& e) {
        if (open_)
            log_.push_back(e);
    }
    void save() {
        if (open_ && !saved_)
            saved_ = {log_.size(), items_};
    }
    void undo_down_to(std::size_t end) {
        while (log_.size() > end) {
            const Entry e = log_.back();
            log_.pop_back();
            switch (e.kind) {
            case Kind::pushed_back:
                items_.pop_back();
                break;
            case Kind::pushed_front:
                items_.pop_front();
                break;
            case Kind::erased:
                items_.insert(items_.begin() + static_cast<std::ptrdiff_t>(e.position), e.value);
                break;
            }
        }
    }

    std::deque<T> items_;
    bool open_ = false;
    std::vector<Entry> log_;
    std::optional<std::pair<std::size_t, std::deque<T>>> saved_;
};

// Any other value (a small vector, a struct of counters): copied once, on its
// first change while open.
template <class T> class JournaledValue {
public:
    const T& get() const { return value_; }
    T& edit() {
        if (open_ && !saved_)
            saved_ = value_;
        return value_;
    }

    void open() {
        open_ = true;
        saved_.reset();
    }
    void checkpoint() { saved_.reset(); }
    void close() {
        checkpoint();
        open_ = false;
    }
    void rollback() {
        if (saved_)
            value_ = std::move(*saved_);
        saved_.reset();
    }

private:
    T value_{};
    bool open_ = false;
    std::optional<T> saved_;
};

} // namespace kvpool::detail
