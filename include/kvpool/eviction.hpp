// Eviction across sub-pools: what a composite (the SWA pair, the Mamba pair,
// the tri-pool) tells an engine's prefix cache when an allocation falls short,
// so that the cache frees finished requests' KV on whichever side it holds,
// and the allocation is tried again. Host logic only.
//
// The loop: the allocation is tried as without a callback (flushes and shifts
// included); short, the callback is called with the shortfall; it frees what
// it chooses (through the composite's own free calls) and returns how many
// bytes it freed, or 0 when it can free nothing more; the allocation is then
// tried again. It stops at the first try that succeeds, or when the callback
// returns 0: the allocation then fails as it would without a callback, and
// changes nothing (what the callback freed stays freed: those were the
// engine's own calls). Every allocation call of a composite asks it (alloc,
// alloc_extend, alloc_decode, alloc_state_slots); a call on one of its sides
// (pair.full().alloc(...)) does not.
//
// Re-entrancy. The callback runs outside any of the composite's
// transactions, between two tries, so every call it makes is a call of its
// own, checked and atomic as usual: it may free on any side (free, free_swa,
// free_state_slots, free groups it closes itself), flush, and read every
// capacity view. It must not allocate on the composite, install another
// callback, or destroy the composite: the first two throw invalid_state. A
// callback that reports bytes freed while no side holds fewer tokens (frees
// left in a free group it did not close, or frees elsewhere) makes the
// allocation throw invalid_state instead of looping. An exception from the
// callback leaves the allocation failed and propagates.
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/types.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>

namespace kvpool {

// What an allocation lacks. pages: pages of side (its own page size) the
// allocation needs beyond what it can take now, at least 1; bytes: what
// freeing that many pages opens in the shared buffer at the allocation's cost
// per page (both KV sides' pages for a KV allocation of a pair with a sliding
// window). An estimate: holes and compaction may need less, and the loop asks
// again when it is not enough.
struct EvictionShortfall {
    std::string side;            // the short sub-pool's name in the layout
    index_t pages = 0;           // pages missing on that side
    std::size_t bytes = 0;       // bytes to free for them
    index_t requested_pages = 0; // pages the allocation asks of that side
};

// Returns the bytes it freed (any positive count when it does not know), 0
// when it can free nothing more.
using EvictionCallback = std::function<std::size_t(const EvictionShortfall&)>;

namespace detail {

// The composites' eviction loop (see the top of this file).
class EvictionLoop {
public:
    void set(EvictionCallback callback) {
        refuse_inside("set_eviction_callback");
        callback_ = std::move(callback);
    }
    bool installed() const { return static_cast<bool>(callback_); }

    // attempt(): the allocation, falsy when short; shortfall(): an
    // EvictionShortfall after a failed try; live(): tokens held on every side
    // (progress: a callback that freed something lowers it).
    template <class Attempt, class Shortfall, class Live>
    auto run(const char* call, const Attempt& attempt, const Shortfall& shortfall,
             const Live& live) {
        refuse_inside(call);
        auto result = attempt();
        while (!result && callback_) {
            const EvictionShortfall missing = shortfall();
            const index_t before = live();
            std::size_t freed = 0;
            {
                const Inside inside(inside_);
                freed = callback_(missing);
            }
            if (freed == 0)
                break;
            if (live() >= before)
                throw Error(ErrorCode::invalid_state,
                            std::string(call) + ": the eviction callback reported " +
                                std::to_string(freed) + " bytes freed, but no side holds fewer " +
                                "tokens (" + std::to_string(before) +
                                " before and after); a free group it opened must be closed "
                                "before it returns");
            result = attempt();
        }
        return result;
    }

private:
    struct Inside {
        explicit Inside(bool& flag) : flag_(flag) { flag_ = true; }
        ~Inside() { flag_ = false; }
        Inside(const Inside&) = delete;
        Inside& operator=(const Inside&) = delete;
        bool& flag_;
    };
    void refuse_inside(const char* call) const {
        if (inside_)
            throw Error(ErrorCode::invalid_state,
                        std::string(call) +
                            " from inside the eviction callback: the callback may only free, "
                            "flush and read sizes");
    }

    EvictionCallback callback_;
    bool inside_ = false;
};

// pages a KV allocation asks of both sides of a full + sliding-window
// composite that can take `available` now: the sliding-window side is named
// when its own index space (holes and headroom) is what runs out, the full
// side (the shared bytes, the ids) otherwise.
template <class Side>
EvictionShortfall kv_pair_shortfall(const Side& full, const Side& swa, index_t pages,
                                    index_t available) {
    const index_t missing = std::max<index_t>(1, pages - available);
    const auto& s = swa.core();
    const auto& f = full.core();
    // Each full page has ratio SWA pages (a smaller SWA page size).
    const index_t ratio = f.page_size() / s.page_size();
    const bool swa_bound = s.hole_pages() + s.index_headroom_pages() < pages * ratio &&
                           f.hole_pages() + f.index_headroom_pages() >= pages &&
                           f.free_virtual_page_count() >= pages;
    const index_t swa_bytes = ratio * s.geometry().page_bytes;
    if (swa_bound)
        return {swa.geometry().spec.name, missing,
                static_cast<std::size_t>(missing) * static_cast<std::size_t>(swa_bytes), pages};
    return {full.geometry().spec.name, missing,
            static_cast<std::size_t>(missing) *
                static_cast<std::size_t>(f.geometry().page_bytes + swa_bytes),
            pages};
}

// pages asked of one side that can take `available` now.
template <class Side>
EvictionShortfall side_shortfall(const Side& side, index_t pages, index_t available) {
    const index_t missing = std::max<index_t>(1, pages - available);
    return {side.geometry().spec.name, missing,
            static_cast<std::size_t>(missing) *
                static_cast<std::size_t>(side.geometry().page_bytes),
            pages};
}

} // namespace detail
} // namespace kvpool
