// Lazy compaction: holes, flushes, completion tokens, and the state-keeping calls.
#include "test_support.hpp"
#include <kvpool/completion_token.hpp>

#include <algorithm>
#include <random>
#include <set>

using namespace kvpool;
using namespace kvpool::test;

namespace {

struct LazyPool {
    Pool pool;
    Allocator up;
    Allocator down;
    LazyPool(index_t page_size, index_t bytes = 64 * 1024, index_t max_moves = 4096)
        : pool(PoolLayout(bytes, {spec("full", 16, page_size, GrowDirection::up),
                                  spec("swa", 24, page_size, GrowDirection::down)})),
          up(pool, "full", with_cap(max_moves)), down(pool, "swa", with_cap(max_moves)) {
        up.bind_peer(down);
    }
    static AllocatorOptions with_cap(index_t max_moves) {
        AllocatorOptions o = options(CompactionMode::lazy);
        o.max_moves_per_flush = max_moves;
        return o;
    }
};

std::vector<index_t> take(Allocator& a, index_t n) {
    auto ids = a.alloc(Space(), n);
    REQUIRE(ids.has_value());
    return to_host(*ids);
}

void drop(std::vector<index_t>& live, const std::vector<index_t>& gone) {
    const std::set<index_t> g(gone.begin(), gone.end());
    live.erase(std::remove_if(live.begin(), live.end(), [&](index_t t) { return g.count(t) != 0; }),
               live.end());
}

} // namespace

TEST_CASE("lazy: free leaves holes, allocation drains them first, urgent flush packs fully",
          "[lazy]") {
    LazyPool p(1);
    auto live = take(p.up, 200);
    stamp_tokens(p.pool, p.up, 0, live);
    std::vector<index_t> gone;
    for (std::size_t i = 0; i < live.size(); i += 2)
        gone.push_back(live[i]);
    p.up.free(Space(), gone);
    drop(live, gone);
    CHECK(p.up.core().hole_pages() == 100);
    CHECK(p.up.core().band_pages() == 200);
    CHECK(p.up.counters().pages_moved == 0);
    check_all(p.pool, p.up, 0, live);

    // 30 new tokens reuse 30 holes; the band does not grow.
    auto fresh = take(p.up, 30);
    stamp_tokens(p.pool, p.up, 0, fresh);
    live.insert(live.end(), fresh.begin(), fresh.end());
    CHECK(p.up.core().band_pages() == 200);
    CHECK(p.up.core().hole_pages() == 70);

    const index_t moved = p.up.flush(Space(), true);
    CHECK(moved > 0);
    CHECK(p.up.core().hole_pages() == 0);
    CHECK(p.up.core().band_pages() == static_cast<index_t>(live.size()));
    check_all(p.pool, p.up, 0, live);
}

TEST_CASE("lazy: a flush hands its moves to the move starter before planning their table writes",
          "[lazy]") {
    LazyPool p(1);
    for (const CompactionMode mode : {CompactionMode::lazy, CompactionMode::eager}) {
        CAPTURE(mode == CompactionMode::lazy ? "lazy" : "eager");
        detail::AllocatorCore core(p.pool.layout().sub_pool("full"), p.pool.total_bytes(),
                                   mode == CompactionMode::lazy ? LazyPool::with_cap(4096)
                                                                : options(mode));
        detail::PageBinding binding;
        REQUIRE(core.alloc_pages(40, binding));
        struct Seen {
            std::size_t moves, destinations, v2p_writes, p2v_writes;
        };
        std::vector<Seen> seen;
        // As a backend's starter: it launches the moves, so it takes them out of the plan.
        core.set_move_starter([&] {
            detail::DevicePlan& plan = core.plan();
            seen.push_back({plan.move_src.size(), plan.move_dst.size(), plan.v2p_index.size(),
                            plan.p2v_index.size()});
            plan.move_src.clear();
            plan.move_dst.clear();
        });
        std::vector<index_t> gone;
        for (std::size_t k = 0; k < 20; k += 2)
            gone.push_back(binding.virtual_pages[k]);
        core.plan().clear();
        core.free_tokens(gone.data(), static_cast<index_t>(gone.size()));
        if (mode == CompactionMode::eager) {
            // The eager free's moves overwrite the freed pages: they wait for the whole plan.
            CHECK(seen.empty());
            CHECK(core.plan().move_src.size() == gone.size());
        } else {
            core.plan().clear();
            const index_t moved = core.flush(true);
            CHECK(moved == static_cast<index_t>(gone.size()));
            REQUIRE(seen.size() == 1);
            CHECK(seen[0].moves == gone.size());
            CHECK(seen[0].destinations == gone.size());
            CHECK(seen[0].v2p_writes == 0);
            CHECK(seen[0].p2v_writes == 0);
            // The table writes stay: a v2p and two p2v writes per move.
            CHECK(core.plan().move_src.empty());
            CHECK(core.plan().v2p_index.size() == gone.size());
            CHECK(core.plan().p2v_index.size() == 2 * gone.size());
        }
        CHECK(core.band_pages() == 30);
        core.check_invariants();
    }
}

TEST_CASE("lazy: an opportunistic flush moves at most its cap and finishes over several calls",
          "[lazy]") {
    LazyPool p(1, 64 * 1024, 8);
    auto live = take(p.up, 300);
    stamp_tokens(p.pool, p.up, 0, live);
    std::vector<index_t> gone(live.begin(), live.begin() + 100);
    p.up.free(Space(), gone);
    drop(live, gone);
    index_t total = 0;
    for (int call = 0; call < 100 && p.up.core().band_pages() > static_cast<index_t>(live.size());
         ++call) {
        const index_t moved = p.up.flush_opportunistic(Space());
        CHECK(moved <= 8);
        total += moved;
        check_all(p.pool, p.up, 0, live);
    }
    CHECK(total == 100);
    CHECK(p.up.core().band_pages() == static_cast<index_t>(live.size()));
}

TEST_CASE("lazy: an opportunistic flush never moves a page the in-flight forward writes",
          "[lazy][hazard]") {
    LazyPool p(1);
    auto live = take(p.up, 50);
    stamp_tokens(p.pool, p.up, 0, live);
    std::vector<index_t> gone(live.begin(), live.begin() + 10);
    p.up.free(Space(), gone);
    drop(live, gone);
    // The forward being written is the newest token: the topmost survivor.
    auto forward = std::make_shared<ManualToken>();
    const index_t written = live.back();
    const index_t physical_before = p.up.core().physical_page_of(written);
    p.up.set_inflight_forward(forward, {written});
    CHECK(p.up.flush_opportunistic(Space()) == 0);
    CHECK(p.up.core().physical_page_of(written) == physical_before);
    forward->complete();
    CHECK(p.up.flush_opportunistic(Space()) > 0);
    check_all(p.pool, p.up, 0, live);
}

TEST_CASE("lazy: moved-from pages wait for their readers before reuse", "[lazy][hazard]") {
    LazyPool p(1);
    auto live = take(p.up, 40);
    stamp_tokens(p.pool, p.up, 0, live);
    std::vector<index_t> gone(live.begin(), live.begin() + 10);
    p.up.free(Space(), gone);
    drop(live, gone);
    auto forward = std::make_shared<ManualToken>();
    p.up.set_latest_forward_done(forward);
    const index_t moved = p.up.flush_opportunistic(Space());
    REQUIRE(moved == 10);
    CHECK(p.up.core().pending_reuse_pages() == 10);
    CHECK(p.up.core().hole_pages() == 0);
    check_all(p.pool, p.up, 0, live);
    // Not reusable yet: an allocation extends the band instead.
    const index_t band = p.up.core().band_pages();
    auto fresh = take(p.up, 5);
    CHECK(p.up.core().band_pages() == band + 5);
    p.up.drain_pending_reuse();
    CHECK(p.up.core().pending_reuse_pages() == 10);
    forward->complete();
    p.up.drain_pending_reuse();
    CHECK(p.up.core().pending_reuse_pages() == 0);
    CHECK(p.up.core().hole_pages() == 10);
    stamp_tokens(p.pool, p.up, 0, fresh);
    live.insert(live.end(), fresh.begin(), fresh.end());
    check_all(p.pool, p.up, 0, live);
}

TEST_CASE("lazy: an allocation short of room flushes the peer's holes into the gap",
          "[lazy][peer]") {
    LazyPool p(1, 16 * 1024);
    auto mine = take(p.up, 100);
    stamp_tokens(p.pool, p.up, 0, mine);
    auto theirs = take(p.down, p.down.available_size());
    stamp_tokens(p.pool, p.down, 1, theirs);
    REQUIRE(p.up.available_size() == 0);
    std::vector<index_t> gone(theirs.begin() + 50, theirs.begin() + 250);
    p.down.free(Space(), gone);
    drop(theirs, gone);
    CHECK(p.up.available_size() == 0); // the holes are inside the peer's band
    CHECK(p.up.schedulable_available_size() == 200 * 24 / 16);
    auto more = take(p.up, 200 * 24 / 16);
    CHECK(p.down.core().hole_pages() == 0);
    stamp_tokens(p.pool, p.up, 0, more);
    mine.insert(mine.end(), more.begin(), more.end());
    check_all(p.pool, p.up, 0, mine);
    check_all(p.pool, p.down, 1, theirs);
}

TEST_CASE("lazy: thousands of churn steps leave no orphaned page", "[lazy][churn]") {
    for (index_t page_size : {index_t(1), index_t(16)}) {
        LazyPool p(page_size, 256 * 1024, 64);
        const std::uint64_t seed = 20261129 + static_cast<std::uint64_t>(page_size);
        INFO("seed " << seed << ", page size " << page_size);
        std::mt19937_64 rng(seed);
        std::vector<std::vector<index_t>> requests;
        for (int step = 0; step < 3000; ++step) {
            const int op = static_cast<int>(rng() % 10);
            if (op < 5) {
                const index_t n = page_size * static_cast<index_t>(1 + rng() % 8);
                auto ids = p.up.alloc(Space(), n);
                if (ids)
                    requests.push_back(to_host(*ids));
            } else if (op < 9 && !requests.empty()) {
                const std::size_t r = rng() % requests.size();
                p.up.free(Space(), requests[r]);
                requests.erase(requests.begin() + static_cast<std::ptrdiff_t>(r));
            } else {
                p.up.flush_opportunistic(Space());
            }
            const auto& core = p.up.core();
            REQUIRE(core.live_pages() + core.hole_pages() + core.pending_reuse_pages() ==
                    core.band_pages());
        }
        std::vector<index_t> live;
        for (const auto& r : requests)
            live.insert(live.end(), r.begin(), r.end());
        stamp_tokens(p.pool, p.up, 0, live);
        p.up.flush(Space(), true);
        CHECK(p.up.core().band_pages() * page_size == p.up.allocated_count());
        CHECK(p.up.core().free_virtual_page_count() + p.up.core().live_pages() ==
              p.up.geometry().page_capacity());
        check_all(p.pool, p.up, 0, live);
    }
}

TEST_CASE("state: backup and restore undo every allocation in the window", "[state]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        LazyPool p(1);
        Allocator& a = p.up;
        auto live = take(a, 30);
        if (mode == CompactionMode::lazy)
            a.free(Space(), {live[3], live[7]});
        drop(live, {live[3], live[7]});
        stamp_tokens(p.pool, a, 0, live);
        const std::string before = a.state_string();
        const auto v2p_before = to_host(a.virtual_to_physical());
        auto snapshot = a.backup_state();
        take(a, 5);
        take(a, 7);
        CHECK_THROWS_AS(a.free(Space(), {live[0]}), Error); // no free inside the window
        a.restore_state(Space(), snapshot);
        CHECK(a.state_string() == before);
        CHECK(to_host(a.virtual_to_physical()) == v2p_before);
        // The same ids come back after a restore.
        auto again = take(a, 5);
        check_all(p.pool, a, 0, live);
        (void)again;
    }
}

TEST_CASE("state: a free group releases everything at its end", "[state]") {
    LazyPool p(16);
    auto live = take(p.up, 64);
    stamp_tokens(p.pool, p.up, 0, live);
    p.up.free_group_begin();
    p.up.free(Space(), {live[0], live[1]});
    p.up.free(Space(), {live[1], live[20]}); // same page twice: fine inside a group
    CHECK(p.up.allocated_count() == 64);
    p.up.free_group_end(Space());
    CHECK(p.up.allocated_count() == 32);
    live.erase(live.begin(), live.begin() + 32);
    check_all(p.pool, p.up, 0, live);
}

TEST_CASE("state: clear returns the pool to empty on host and device", "[state]") {
    LazyPool p(1);
    take(p.up, 40);
    take(p.down, 40);
    p.up.free(Space(), {20, 21});
    p.up.clear(Space());
    CHECK(p.up.allocated_count() == 0);
    CHECK(p.up.core().band_pages() == 0);
    auto v2p = to_host(p.up.virtual_to_physical());
    CHECK(v2p[0] == 0);
    CHECK(std::count(v2p.begin(), v2p.end(), unbound) ==
          static_cast<std::ptrdiff_t>(v2p.size()) - 1);
    check_all(p.pool, p.up, 0, {});
    check_all(p.pool, p.down, 1, {});
}

TEST_CASE("counters: moves, bytes and holes peak are counted", "[lazy][counters]") {
    LazyPool p(1);
    auto live = take(p.up, 20);
    p.up.free(Space(), {live[0], live[1], live[2]});
    CHECK(p.up.counters().holes_peak == 3);
    p.up.flush(Space(), true);
    CHECK(p.up.counters().pages_moved == 3);
    CHECK(p.up.counters().bytes_moved == 3 * 16);
    CHECK(p.up.counters().flushes == 1);
    CHECK(p.up.counters().allocs == 1);
    CHECK(p.up.counters().frees == 1);
    live.erase(live.begin(), live.begin() + 3);
    stamp_tokens(p.pool, p.up, 0, live);
    check_all(p.pool, p.up, 0, live);
}
