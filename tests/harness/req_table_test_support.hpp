// Shared by the request table tests: the state-slot allocator they wire in,
// device row reads, state descriptions and the misuse check.
#pragma once

#include "test_support.hpp"

#include <kvpool/requests/hybrid_req_to_token_pool.hpp>
#include <kvpool/requests/req_to_token_pool.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kvpool::test {

using Table = ReqToTokenPool<Space>;
using Hybrid = HybridReqToTokenPool<Space>;

// The trivial state-slot allocator the tests wire in: FIFO free list of slots
// 1..size (0 stays the padding state), refusing double frees itself, so a pool
// that frees a slot twice fails here.
class FreeListStates : public StateSlotAllocator<Space> {
public:
    explicit FreeListStates(index_t size) : size_(size) { clear(Space()); }

    std::optional<std::vector<index_t>> alloc(const Space&, index_t n) override {
        if (n < 0)
            throw Error(ErrorCode::invalid_argument, "negative state alloc");
        if (n > available_size())
            return std::nullopt;
        std::vector<index_t> out(free_.begin(), free_.begin() + n);
        free_.erase(free_.begin(), free_.begin() + n);
        for (const index_t s : out)
            live_.insert(s);
        return out;
    }
    void free(const Space&, const std::vector<index_t>& slots) override {
        std::set<index_t> named;
        for (const index_t s : slots)
            if (live_.count(s) == 0 || !named.insert(s).second)
                throw Error(ErrorCode::not_allocated,
                            "state slot " + std::to_string(s) + " is not allocated");
        for (const index_t s : slots) {
            live_.erase(s);
            free_.push_back(s);
        }
    }
    void clear(const Space&) override {
        free_.clear();
        live_.clear();
        for (index_t s = 1; s <= size_; ++s)
            free_.push_back(s);
    }

    // Its free list and live set as they were, should body throw.
    void atomically(const Space&, const std::function<void()>& body) override {
        const std::deque<index_t> free = free_;
        const std::set<index_t> live = live_;
        try {
            body();
        } catch (...) {
            free_ = free;
            live_ = live;
            throw;
        }
    }

    index_t available_size() const { return static_cast<index_t>(free_.size()); }
    bool is_live(index_t s) const { return live_.count(s) != 0; }
    const std::set<index_t>& live() const { return live_; }

private:
    index_t size_;
    std::deque<index_t> free_;
    std::set<index_t> live_;
};

template <class View> std::vector<index_t> device_row(const View& table, index_t row) {
    return to_host(Kokkos::subview(table, row, Kokkos::ALL()));
}

// The call must throw kvpool::Error with this code, naming `named` if given,
// and leave what `snapshot` describes as it was.
inline void expect_error(ErrorCode code, const std::function<void()>& call,
                         const std::function<std::string()>& snapshot,
                         const std::string& named = "") {
    const std::string before = snapshot();
    try {
        call();
        FAIL("accepted");
    } catch (const Error& e) {
        INFO(e.what());
        CHECK(to_string(e.code()) == std::string(to_string(code)));
        if (!named.empty())
            CHECK(std::string(e.what()).find(named) != std::string::npos);
    }
    CHECK(snapshot() == before);
}

inline std::string describe(const Table& t) {
    std::string s = t.state_string();
    for (index_t r = 1; r <= t.size(); ++r)
        s += t.is_allocated(r) ? " A" : " -";
    return s;
}

inline std::string describe(const Hybrid& h, const FreeListStates& states) {
    std::string s = fmt::format("{}; state slots free {}, live {};", h.state_string(),
                                states.available_size(), states.live());
    for (index_t r = 1; r <= h.size(); ++r) {
        if (!h.is_allocated(r)) {
            s += " -";
            continue;
        }
        s += fmt::format(" [{}: mamba {}", r, h.mamba_slot(r));
        if (h.options().enable_mamba_extra_buffer) {
            s += fmt::format(" tracks {}", h.mamba_ping_pong_track_buffer(r));
            if (h.mamba_slot(r) != unbound)
                s += fmt::format(" next {}", h.mamba_next_track_idx(r));
        }
        s += "]";
    }
    return s;
}

inline HybridReqToTokenPoolOptions extra_buffer(bool lazy, index_t size = 2) {
    HybridReqToTokenPoolOptions o;
    o.enable_mamba_extra_buffer = true;
    o.enable_mamba_extra_buffer_lazy = lazy;
    o.mamba_ping_pong_track_buffer_size = size;
    return o;
}

} // namespace kvpool::test
