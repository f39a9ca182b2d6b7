// No error leaves a half-changed state. Every throw site of the allocator and
// its composites is hit (bad input, calls out of state, and the internal
// checks, forced through a test seam), on sides holding live data, holes and
// pages pending reuse; after each, both sides are exactly as before (host
// state, hole and free-id order, pending batches, every v2p entry), the device
// tables match the host (check_invariants()), and every live token's stamped
// KV bytes are found through translate.
#include "atomicity_harness.hpp"
#include "core_test_access.hpp"

#include <kvpool/swa_pair.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using SwaPair = UnifiedSWAAllocator<Space>;
using Seam = detail::AllocatorCoreTestAccess;

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
