// The shared harness of the atomicity tests: a side's whole state as text,
// and a check that a call which throws leaves the watched sides exactly as
// they were (host state, hole and free-id order, pending batches, every v2p
// entry) with the device tables matching the host and every live token's
// stamped bytes found through translate.
#pragma once

#include "test_support.hpp"
#include <kvpool/completion_token.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kvpool::test {

// A side's pages and ids as text: watermark, hole and free-id order, pages
// pending reuse, every v2p entry, an open free group.
inline std::string side_tables(const Allocator& side) {
    const auto& core = side.core();
    std::vector<index_t> v2p, pending;
    for (index_t v = 0; v < core.virtual_table_pages(); ++v)
        v2p.push_back(core.physical_page_of(v));
    for (const auto& batch : core.pending_batches())
        pending.insert(pending.end(), batch.pages.begin(), batch.pages.end());
    return fmt::format(
        "watermark {}\n holes {}\n free ids {}\n pending {}\n v2p {}\n group {}", core.watermark(),
        std::vector<index_t>(core.hole_list().begin(), core.hole_list().end()),
        std::vector<index_t>(core.free_virtual_pages().begin(), core.free_virtual_pages().end()),
        pending, v2p, core.in_free_group());
}

// Everything a call could change on one side, as text.
inline std::string side_state(const Allocator& side) {
    return side.state_string() + "\n " + side_tables(side);
}

// A side whose state a failed call must leave alone: its stamp tag and live tokens.
struct Watched {
    const Allocator& side;
    int tag;
    const std::vector<index_t>& live;
};

// The call throws an Error with this code, and the sides are as before. A
// state broken on purpose (to force an internal check) is mended between the
// call and the comparison.
inline void expect_unchanged(const Pool& pool, const std::vector<Watched>& sides, ErrorCode code,
                             const std::function<void()>& call,
                             const std::function<void()>& break_state = {},
                             const std::function<void()>& mend_state = {}) {
    std::vector<std::string> before;
    for (const Watched& w : sides)
        before.push_back(side_state(w.side));
    if (break_state)
        break_state();
    try {
        call();
        FAIL("the call was accepted");
    } catch (const Error& e) {
        INFO(e.what());
        CHECK(e.code() == code);
    }
    if (mend_state)
        mend_state();
    for (std::size_t i = 0; i < sides.size(); ++i) {
        CHECK(side_state(sides[i].side) == before[i]);
        check_all(pool, sides[i].side, sides[i].tag, sides[i].live);
    }
}

// Two sides of one buffer, each with live stamped tokens and (lazy) holes and
// pages pending reuse behind a forward that has since completed.
struct Sides {
    Pool pool;
    Allocator full;
    Allocator other;
    std::vector<index_t> full_live, other_live;

    Sides(CompactionMode mode, index_t page_size, bool other_owns_ids = true)
        : pool(PoolLayout(40 * 1024, {spec("full", 16, page_size, GrowDirection::up),
                                      spec("other", 24, page_size, GrowDirection::down)})),
          full(pool, "full", options(mode)), other(pool, "other", options(mode, other_owns_ids)) {
        full.bind_peer(other);
        full_live = take(full, 24 * page_size);
        if (other_owns_ids) {
            other_live = take(other, 20 * page_size);
            leave_holes(other, other_live, 1);
        }
        leave_holes(full, full_live, 0);
    }

    std::vector<index_t> take(Allocator& side, index_t n) {
        auto ids = to_host(*side.alloc(Space(), n));
        stamp_tokens(pool, side, &side == &full ? 0 : 1, ids);
        return ids;
    }
    // Frees every third page, then (lazy) flushes once while a forward reads,
    // so moved-from pages wait for reuse; the forward then completes.
    void leave_holes(Allocator& side, std::vector<index_t>& live, int tag) {
        const index_t ps = side.page_size();
        std::vector<index_t> gone, kept;
        for (std::size_t i = 0; i < live.size(); ++i)
            (i / ps % 3 == 1 ? gone : kept).push_back(live[i]);
        side.free(Space(), gone);
        live = kept;
        auto forward = std::make_shared<ManualToken>();
        side.set_latest_forward_done(forward);
        side.flush_opportunistic(Space());
        forward->complete();
        check_all(pool, side, tag, live);
    }

    void expect_unchanged(ErrorCode code, const std::function<void()>& call,
                          const std::function<void()>& break_state = {},
                          const std::function<void()>& mend_state = {}) {
        test::expect_unchanged(pool, {{full, 0, full_live}, {other, 1, other_live}}, code, call,
                               break_state, mend_state);
    }
};

} // namespace kvpool::test
