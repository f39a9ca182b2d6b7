// An engine over one composite (the SWA pair, the Mamba pair or the tri-pool)
// with a prefix cache of finished requests, evicted least recently used:
// through the composite's eviction callback, or by the test's own loop (try,
// evict one, try again), which the callback must match step for step. Every
// token and state slot handed out is stamped, for the data check.
#pragma once

#include "test_random.hpp"
#include "test_support.hpp"

#include <kvpool/eviction.hpp>
#include <kvpool/mamba_pair.hpp>
#include <kvpool/mamba_swa_allocator.hpp>
#include <kvpool/swa_pair.hpp>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace kvpool::test::eviction {

enum class Kind { swa, mamba, tri };

inline const char* name_of(Kind k) {
    return k == Kind::swa ? "swa pair" : k == Kind::mamba ? "mamba pair" : "tri-pool";
}

// Entry bytes not multiples of each other; the state slot is several KV pages.
inline PoolLayout layout_of(Kind kind, index_t ps, index_t total) {
    switch (kind) {
    case Kind::swa:
        return PoolLayout(total, {spec("full", 24, ps, GrowDirection::up),
                                  spec("swa", 40, ps, GrowDirection::down)});
    case Kind::mamba:
        return PoolLayout(total, {spec("full", 24, ps, GrowDirection::up),
                                  spec("mamba", 24 * ps * 3 + 8, 1, GrowDirection::down)});
    default:
        return PoolLayout(total, {spec("mamba", 24 * ps * 3 + 8, 1, GrowDirection::up),
                                  floating_spec("swa", 40, ps, 0.4),
                                  spec("full", 24, ps, GrowDirection::down)});
    }
}

constexpr int full_tag = 0, swa_tag = 1, state_tag = 2;

// What a request holds: its virtual token ids in position order (its first
// token starts a page), the window's start (the sliding-window copies of its
// pages below window_pages are released) and its state slot.
struct Request {
    std::vector<index_t> tokens;
    index_t window_pages = 0;
    index_t slot = unbound;
};

// An allocation the engine was asked for, as the callback sees it.
struct Pending {
    bool state = false; // state slots rather than KV
    index_t pages = 0;  // pages (state slots) asked for
};

template <Kind K> struct CompositeOf;
template <> struct CompositeOf<Kind::swa> {
    using type = UnifiedSWAAllocator<Space>;
};
template <> struct CompositeOf<Kind::mamba> {
    using type = UnifiedMambaAllocator<Space>;
};
template <> struct CompositeOf<Kind::tri> {
    using type = UnifiedMambaSWAAllocator<Space>;
};

template <Kind K> class Engine {
public:
    using Composite = typename CompositeOf<K>::type;
    static constexpr bool has_window = K != Kind::mamba;
    static constexpr bool has_state = K != Kind::swa;

    // with_callback: the composite evicts through the callback; otherwise
    // the engine's own loop does.
    Engine(index_t ps, index_t total, CompactionMode mode, bool with_callback)
        : pool_(layout_of(K, ps, total)), c_(pool_, mode), ps_(ps) {
        use_callback(with_callback);
    }
    void use_callback(bool on) {
        if (on)
            c_.set_eviction_callback(
                [this](const EvictionShortfall& s) { return on_shortfall(s); });
        else
            c_.set_eviction_callback(nullptr);
    }

    Composite& composite() { return c_; }
    Pool& pool() { return pool_; }
    index_t page_size() const { return ps_; }
    std::vector<Request>& running() { return running_; }
    std::deque<Request>& cache() { return cache_; }
    int evictions() const { return evictions_; }
    int callback_calls() const { return callback_calls_; }
    // Checks of the callback's arguments that failed (empty: none).
    const std::vector<std::string>& callback_errors() const { return callback_errors_; }

    // A new request of `tokens` tokens (and its state slot first, where the
    // model has one; the slot goes back when its KV does not fit).
    bool admit(index_t tokens) {
        Request r;
        if constexpr (has_state) {
            const auto slot = allocate({true, 1}, [&] { return c_.alloc_state_slots(Space(), 1); });
            if (!slot)
                return false;
            r.slot = to_host(*slot)[0];
            stamp_tokens(pool_, c_.state(), state_tag, {r.slot}, scratch_);
        }
        const IndexView out = kk::uninitialized<IndexView>("test::out", tokens);
        const IndexView last = to_device({unbound});
        if (!allocate({false, (tokens + ps_ - 1) / ps_},
                      [&] { return c_.alloc_extend(Space(), {0}, {tokens}, last, out); })) {
            if constexpr (has_state)
                c_.free_state_slots(Space(), {r.slot});
            return false;
        }
        r.tokens = to_host(out);
        stamp_kv(r.tokens);
        running_.push_back(std::move(r));
        return true;
    }

    // One token for running request i.
    bool decode(std::size_t i) {
        Request& r = running_[i];
        const index_t n = static_cast<index_t>(r.tokens.size());
        const IndexView out = kk::uninitialized<IndexView>("test::out", 1);
        const IndexView last = to_device({r.tokens.back()});
        if (!allocate({false, n % ps_ == 0 ? 1 : 0},
                      [&] { return c_.alloc_decode(Space(), {n + 1}, last, out); }))
            return false;
        const index_t id = to_host(out)[0];
        r.tokens.push_back(id);
        stamp_kv({id});
        return true;
    }

    // Running request i's oldest page in the window leaves it.
    void slide_window(std::size_t i) {
        Request& r = running_[i];
        if constexpr (has_window) {
            if (r.window_pages + 1 >= pages_of(r))
                return;
            c_.free_swa(Space(), {r.tokens[static_cast<std::size_t>(r.window_pages * ps_)]});
            ++r.window_pages;
        }
    }

    // Running request i finishes: into the cache (most recently used), or freed.
    void finish(std::size_t i, bool cache_it) {
        Request r = std::move(running_[i]);
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
        if (cache_it)
            cache_.push_back(std::move(r));
        else
            release(r);
    }

    // Cached request i is used again (a prefix hit): it runs again.
    void reuse(std::size_t i) {
        running_.push_back(std::move(cache_[i]));
        cache_.erase(cache_.begin() + static_cast<std::ptrdiff_t>(i));
    }

    // The least recently used cached request freed; false when none is left.
    // Every third eviction frees inside a free group.
    bool evict_one() {
        if (cache_.empty())
            return false;
        Request r = std::move(cache_.front());
        cache_.pop_front();
        const bool grouped = evictions_ % 3 == 2;
        if (grouped)
            c_.free_group_begin();
        release(r);
        if (grouped)
            c_.free_group_end(Space());
        ++evictions_;
        return true;
    }

    void flush() { c_.flush_opportunistic(Space()); }

    // Every side's state, one string (the engines of a differential pair must agree).
    std::string state() const {
        std::string s = c_.full().state_string();
        if constexpr (has_window)
            s += " | " + c_.swa().state_string();
        if constexpr (has_state)
            s += " | " + c_.state().state_string();
        return s;
    }

    // check_invariants() on every side, then the data check over every live
    // token and slot (running and cached requests). Returns the bad entries.
    std::size_t check() {
        c_.check_invariants(Space());
        std::vector<index_t> full, window, slots;
        const auto add = [&](const Request& r) {
            full.insert(full.end(), r.tokens.begin(), r.tokens.end());
            window.insert(window.end(),
                          r.tokens.begin() + static_cast<std::ptrdiff_t>(r.window_pages * ps_),
                          r.tokens.end());
            if (r.slot != unbound)
                slots.push_back(r.slot);
        };
        for (const Request& r : running_)
            add(r);
        for (const Request& r : cache_)
            add(r);
        std::size_t bad = check_stamps(pool_, c_.full(), full_tag, full, scratch_);
        if constexpr (has_window)
            bad += check_stamps(pool_, c_.swa(), swa_tag, window, scratch_);
        if constexpr (has_state)
            bad += check_stamps(pool_, c_.state(), state_tag, slots, scratch_);
        return bad;
    }

private:
    index_t pages_of(const Request& r) const {
        return (static_cast<index_t>(r.tokens.size()) + ps_ - 1) / ps_;
    }
    // One token per page: freeing it frees the page.
    std::vector<index_t> page_tokens(const Request& r, index_t from_page) const {
        std::vector<index_t> t;
        for (index_t p = from_page; p < pages_of(r); ++p)
            t.push_back(r.tokens[static_cast<std::size_t>(p * ps_)]);
        return t;
    }
    void release(const Request& r) {
        if (!r.tokens.empty())
            c_.free(Space(), page_tokens(r, 0));
        if constexpr (has_state)
            c_.free_state_slots(Space(), {r.slot});
    }
    void stamp_kv(const std::vector<index_t>& ids) {
        stamp_tokens(pool_, c_.full(), full_tag, ids, scratch_);
        if constexpr (has_window)
            stamp_tokens(pool_, c_.swa(), swa_tag, ids, scratch_);
    }

    // The allocation; without a callback, the engine's own loop evicts one
    // cached request at a time until it succeeds or the cache is empty.
    template <class Alloc> auto allocate(const Pending& pending, const Alloc& alloc) {
        pending_ = pending;
        auto result = alloc();
        if (!c_.has_eviction_callback())
            while (!result && evict_one())
                result = alloc();
        return result;
    }

    // The callback: checks what it is told against the composite, then
    // evicts one cached request.
    std::size_t on_shortfall(const EvictionShortfall& s) {
        ++callback_calls_;
        const auto fail = [&](const std::string& what) {
            callback_errors_.push_back(what + " (side " + s.side + ", pages " +
                                       std::to_string(s.pages) + ", bytes " +
                                       std::to_string(s.bytes) + ")");
        };
        index_t available = 0;
        std::vector<std::string> sides;
        index_t page_bytes = 0;
        if (pending_.state) {
            if constexpr (has_state) {
                available = K == Kind::tri ? state_slots_available() : c_.state().available_size();
                sides = {c_.state().geometry().spec.name};
                page_bytes = c_.state().geometry().page_bytes;
            }
        } else {
            available = kv_available() / ps_;
            sides = {c_.full().geometry().spec.name};
            page_bytes = c_.full().geometry().page_bytes;
            if constexpr (has_window) {
                sides.push_back(c_.swa().geometry().spec.name);
                if (s.side == c_.full().geometry().spec.name)
                    page_bytes += c_.swa().geometry().page_bytes;
                else
                    page_bytes = c_.swa().geometry().page_bytes;
            }
        }
        if (available >= pending_.pages)
            fail("called while the allocation fits (" + std::to_string(available) +
                 " pages available)");
        if (std::find(sides.begin(), sides.end(), s.side) == sides.end())
            fail("a side the allocation does not ask");
        if (s.requested_pages != pending_.pages)
            fail("requested_pages is not the allocation's " + std::to_string(pending_.pages));
        if (s.pages != std::max<index_t>(1, pending_.pages - available))
            fail("pages is not the allocation's need less the available " +
                 std::to_string(available));
        if (s.bytes != static_cast<std::size_t>(s.pages * page_bytes))
            fail("bytes is not pages times the allocation's page bytes " +
                 std::to_string(page_bytes));
        if (!evict_one())
            return 0;
        return static_cast<std::size_t>(s.bytes);
    }

    index_t kv_available() const {
        if constexpr (K == Kind::mamba)
            return c_.full().available_size();
        else
            return c_.available_size();
    }
    index_t state_slots_available() const {
        if constexpr (K == Kind::tri)
            return c_.state_slots_available();
        else
            return 0;
    }

    Pool pool_;
    Composite c_;
    index_t ps_;
    DataCheckScratch scratch_;
    std::vector<Request> running_;
    std::deque<Request> cache_;
    Pending pending_;
    int evictions_ = 0;
    int callback_calls_ = 0;
    std::vector<std::string> callback_errors_;
};

} // namespace kvpool::test::eviction
