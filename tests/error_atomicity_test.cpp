// No error leaves a half-changed state. Every throw site of the allocator and
// its composites is hit (bad input, calls out of state, and the internal
// checks, forced through a test seam), on sides holding live data, holes and
// pages pending reuse; after each, both sides are exactly as before (host
// state, hole and free-id order, pending batches, every v2p entry), the device
// tables match the host (check_invariants()), and every live token's stamped
// KV bytes are found through translate.
#include "test_support.hpp"
#include <kvpool/completion_token.hpp>

#include <kvpool/swa_pair.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>

namespace kvpool::detail {

// The test seam: breaks one piece of a core's bookkeeping and mends it again,
// so that the internal checks can be forced.
struct AllocatorCoreTestAccess {
    static void set_live(const AllocatorCore& core, index_t page, bool live) {
        mutable_core(core).page_state_[static_cast<std::size_t>(page)] =
            live ? AllocatorCore::PageState::live : AllocatorCore::PageState::outside;
    }
    static void move_watermark(const AllocatorCore& core, index_t by) {
        mutable_core(core).watermark_ += by;
    }

private:
    static AllocatorCore& mutable_core(const AllocatorCore& core) {
        return const_cast<AllocatorCore&>(core);
    }
};

} // namespace kvpool::detail

using namespace kvpool;
using namespace kvpool::test;

namespace {

using SwaPair = UnifiedSWAAllocator<Space>;
using Seam = detail::AllocatorCoreTestAccess;

// A side's pages and ids as text: watermark, hole and free-id order, pages
// pending reuse, every v2p entry, an open free group.
std::string side_tables(const Allocator& side) {
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
std::string side_state(const Allocator& side) {
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
void expect_unchanged(const Pool& pool, const std::vector<Watched>& sides, ErrorCode code,
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
        ::expect_unchanged(pool, {{full, 0, full_live}, {other, 1, other_live}}, code, call,
                           break_state, mend_state);
    }
};

} // namespace

TEST_CASE("atomic errors: bad input to every call of a side changes nothing", "[errors]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (index_t ps : {index_t(1), index_t(16)}) {
            INFO(to_string(mode) << ", page size " << ps);
            Sides f(mode, ps);
            if (mode == CompactionMode::lazy)
                REQUIRE(f.full.core().pending_reuse_pages() > 0);
            Allocator& a = f.full;
            const index_t live = f.full_live.back();
            const index_t unallocated = a.core().free_virtual_pages().front() * ps;
            IndexView out("out", static_cast<std::size_t>(2 * ps));
            if (ps > 1)
                f.expect_unchanged(ErrorCode::misaligned, [&] { a.alloc(Space(), ps + 1); });
            f.expect_unchanged(ErrorCode::misaligned, [&] { a.alloc(Space(), -ps); });
            f.expect_unchanged(ErrorCode::invalid_argument, [&] { a.alloc(Space(), ps, out); });
            f.expect_unchanged(ErrorCode::wrong_role,
                               [&] { a.alloc_with_virtual(Space(), {live / ps}); });
            f.expect_unchanged(ErrorCode::invalid_argument, [&] {
                a.alloc_extend(Space(), {0, 0}, {3}, to_device({unbound}), out);
            });
            f.expect_unchanged(ErrorCode::invalid_argument, [&] {
                a.alloc_extend(Space(), {0}, {3}, to_device({unbound, unbound}), out);
            });
            f.expect_unchanged(ErrorCode::invalid_argument,
                               [&] { a.alloc_extend(Space(), {5}, {3}, to_device({live}), out); });
            f.expect_unchanged(ErrorCode::invalid_argument,
                               [&] { a.alloc_extend(Space(), {-1}, {3}, to_device({live}), out); });
            f.expect_unchanged(ErrorCode::invalid_argument, [&] {
                a.alloc_extend(Space(), {0}, {3}, to_device({unbound}), out);
            });
            f.expect_unchanged(ErrorCode::invalid_argument, [&] {
                a.alloc_decode(Space(), {2}, to_device({live, live}), out);
            });
            f.expect_unchanged(ErrorCode::invalid_argument, [&] {
                a.alloc_decode(Space(), {2, 3}, to_device({live, live}), IndexView("three", 3));
            });
            f.expect_unchanged(ErrorCode::invalid_argument, [&] {
                a.alloc_decode(Space(), {0, 3}, to_device({live, live}), out);
            });
            f.expect_unchanged(ErrorCode::out_of_range, [&] {
                a.free(Space(), {live, index_t(1) << 40});
            });
            f.expect_unchanged(ErrorCode::out_of_range, [&] { a.free(Space(), {live, -1}); });
            f.expect_unchanged(ErrorCode::not_allocated, [&] {
                a.free(Space(), {live, unallocated});
            });
            f.expect_unchanged(ErrorCode::invalid_argument, [&] {
                a.translate(Space(), to_device({live}), IndexView("two", 2));
            });
            f.expect_unchanged(ErrorCode::invalid_argument, [&] { a.bind_peer(a); });
            // A free group: a bad free is refused at once and leaves the group as it was.
            a.free_group_begin();
            a.free(Space(), {f.full_live.front()});
            f.expect_unchanged(ErrorCode::not_allocated, [&] { a.free(Space(), {unallocated}); });
            a.free_group_end(Space());
            f.full_live.erase(f.full_live.begin(), f.full_live.begin() + ps);
            check_all(f.pool, a, 0, f.full_live);
        }
}

TEST_CASE("atomic errors: calls out of state change nothing", "[errors]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        INFO(to_string(mode));
        Sides f(mode, 4);
        Allocator& a = f.full;
        const AllocatorSnapshot stale = a.backup_state();
        a.commit_state(stale);
        f.expect_unchanged(ErrorCode::invalid_state, [&] { a.restore_state(Space(), stale); });
        f.expect_unchanged(ErrorCode::invalid_state, [&] { a.commit_state(stale); });

        // Inside a backup window a free is refused; so is the end of a free
        // group, which keeps its frees for after the window.
        const AllocatorSnapshot window = a.backup_state();
        f.expect_unchanged(ErrorCode::invalid_state,
                           [&] { a.free(Space(), {f.full_live.back()}); });
        a.free_group_begin();
        a.free(Space(), {f.full_live.back()});
        f.expect_unchanged(ErrorCode::invalid_state, [&] { a.free_group_end(Space()); });
        a.restore_state(Space(), window);
        a.free_group_end(Space());
        f.full_live.resize(f.full_live.size() - 4);
        check_all(f.pool, a, 0, f.full_live);
    }
}

TEST_CASE("atomic errors: the internal checks of an eager free fire before any change",
          "[errors][internal]") {
    for (index_t ps : {index_t(1), index_t(16)}) {
        INFO("page size " << ps);
        Sides f(CompactionMode::eager, ps);
        Allocator& a = f.full;
        const auto& core = a.core();
        // A survivor at the frontier the bookkeeping lost: holes outnumber survivors.
        const index_t top = core.watermark() - 1;
        const auto lose_top = [&] { Seam::set_live(core, top, false); };
        const auto mend_top = [&] { Seam::set_live(core, top, true); };
        f.expect_unchanged(
            ErrorCode::internal, [&] { a.free(Space(), {f.full_live.front()}); }, lose_top,
            mend_top);
        // A band shorter than the pages a free releases.
        const index_t shorter = core.band_pages() - 1;
        f.expect_unchanged(
            ErrorCode::internal,
            [&] {
                a.free(Space(), {f.full_live[0], f.full_live[ps]});
            },
            [&] { Seam::move_watermark(core, -shorter); },
            [&] { Seam::move_watermark(core, shorter); });
        // A broken invariant is reported, and the report changes nothing either.
        f.expect_unchanged(
            ErrorCode::internal, [&] { a.check_invariants(); }, lose_top, mend_top);
    }
}

TEST_CASE("atomic errors: the SWA pair checks both sides before it flushes or frees",
          "[errors][pair]") {
    for (index_t ps : {index_t(1), index_t(16)}) {
        INFO("page size " << ps);
        Pool pool(PoolLayout(24 * 1024, {spec("full", 16, ps, GrowDirection::up),
                                         spec("swa", 24, ps, GrowDirection::down)}));
        SwaPair pair(pool, CompactionMode::lazy);
        auto live = to_host(*pair.alloc(Space(), pair.available_size()));
        std::vector<index_t> gone, kept;
        for (std::size_t i = 0; i < live.size(); ++i)
            (i / ps % 2 ? gone : kept).push_back(live[i]);
        pair.free(Space(), gone);
        live = kept;
        stamp_tokens(pool, pair.full(), 0, live);
        stamp_tokens(pool, pair.swa(), 1, live);
        // Both sides hold holes; the joint room now is short of what is asked
        // below, so a valid call would flush both sides first.
        const index_t need = pair.available_size() + 2 * ps;
        REQUIRE(pair.full().core().hole_pages() > 0);
        const auto expect_unchanged = [&](ErrorCode code, const std::function<void()>& call) {
            ::expect_unchanged(pool, {{pair.full(), 0, live}, {pair.swa(), 1, live}}, code, call);
        };
        IndexView out("out", static_cast<std::size_t>(need));
        expect_unchanged(ErrorCode::invalid_argument,
                         [&] { pair.alloc(Space(), need, IndexView("short", 1)); });
        if (ps > 1)
            expect_unchanged(ErrorCode::misaligned, [&] { pair.alloc(Space(), need + 1); });
        expect_unchanged(ErrorCode::invalid_argument, [&] {
            pair.alloc_extend(Space(), {0}, {need}, to_device({unbound, unbound}), out);
        });
        expect_unchanged(ErrorCode::invalid_argument, [&] {
            pair.alloc_decode(Space(), {1, 0}, to_device({unbound, live[0]}), out);
        });
        expect_unchanged(ErrorCode::not_allocated, [&] { pair.free_swa(Space(), {gone[0]}); });

        // A backup window on the SWA side refuses the pair's free before the
        // full side frees anything, and the end of a free group likewise.
        const AllocatorSnapshot window = pair.swa().backup_state();
        expect_unchanged(ErrorCode::invalid_state, [&] { pair.free(Space(), {live.back()}); });
        pair.free_group_begin();
        pair.free(Space(), {live.back()});
        expect_unchanged(ErrorCode::invalid_state, [&] { pair.free_group_end(Space()); });
        pair.swa().commit_state(window);
        pair.free_group_end(Space());
        live.resize(live.size() - static_cast<std::size_t>(ps));

        // The SWA side already holds the ids the full side mints next: its
        // refusal undoes the full side's allocation and the error comes through.
        const index_t next = pair.full().core().free_virtual_pages().front();
        REQUIRE(pair.swa().alloc_with_virtual(Space(), {next}));
        const std::string full_before = side_state(pair.full());
        CHECK_THROWS_AS(pair.alloc(Space(), ps), Error);
        CHECK(side_state(pair.full()) == full_before);
        check_all(pool, pair.full(), 0, live);
    }
}

TEST_CASE("atomic errors: a request no state can grant makes no View and fails like a shortfall",
          "[errors]") {
    // Beyond the side's capacity: no output View is made (it would not fit in
    // memory), the request fails in the core, and as every shortfall does it
    // first flushes the lazy peer (the reference's behaviour).
    Sides f(CompactionMode::lazy, 1);
    REQUIRE(f.other.core().hole_pages() + f.other.core().pending_reuse_pages() > 0);
    const std::string before = side_tables(f.full);
    CHECK_FALSE(f.full.alloc(Space(), index_t(1) << 40).has_value());
    CHECK(side_tables(f.full) == before);
    CHECK(f.other.core().hole_pages() + f.other.core().pending_reuse_pages() == 0);
    check_all(f.pool, f.full, 0, f.full_live);
    check_all(f.pool, f.other, 1, f.other_live);
}
