// More than two bands in one buffer: the layout of N sub-pools, and a floating
// band between two anchored ones (it grows into the wider gap, and shifts away
// when a neighbour needs the bytes its edge holds), with the data check after
// every relocation.
#include "atomicity_harness.hpp"
#include "device_fault_support.hpp"
#include "self_completing_token.hpp"
#include "test_config.hpp"
#include "test_random.hpp"
#include "test_support.hpp"

#include <kvpool/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <memory>

using namespace kvpool;
using namespace kvpool::test;

namespace {

// [state (slots of 640 bytes) up | window KV floating | full KV down]
struct ThreeBands {
    Pool pool;
    Allocator state, window, full;
    std::array<Allocator*, 3> sides{&state, &window, &full};
    std::array<std::vector<index_t>, 3> live; // tokens per side, stamped
    DataCheckScratch scratch;

    ThreeBands(CompactionMode mode, index_t page_size, index_t bytes = 64 * 1024,
               double float_at = 0.5)
        : pool(PoolLayout(bytes, {spec("state", 640, 1, GrowDirection::up),
                                  floating_spec("window", 16, page_size, float_at),
                                  spec("full", 32, page_size, GrowDirection::down)})),
          state(pool, "state", options(mode)), window(pool, "window", options(mode)),
          full(pool, "full", options(mode)) {
        state.bind_neighbour(window);
        window.bind_neighbour(full);
    }

    // Allocates tokens on side s and stamps them; false when there is no room.
    bool alloc(int s, index_t tokens) {
        const auto ids = sides[s]->alloc(Space(), tokens);
        if (!ids)
            return false;
        const std::vector<index_t> fresh = to_host(*ids);
        stamp_tokens(pool, *sides[s], s, fresh, scratch);
        live[s].insert(live[s].end(), fresh.begin(), fresh.end());
        return true;
    }
    // Frees the whole pages holding these of side s's tokens.
    void free_pages_of(int s, const std::vector<index_t>& tokens) {
        const index_t ps = sides[s]->page_size();
        std::vector<index_t> pages;
        for (index_t t : tokens)
            pages.push_back(t / ps);
        std::vector<index_t> gone, kept;
        for (index_t t : live[s])
            (std::find(pages.begin(), pages.end(), t / ps) != pages.end() ? gone : kept)
                .push_back(t);
        sides[s]->free(Space(), gone);
        live[s] = kept;
    }
    void check() {
        for (int s = 0; s < 3; ++s) {
            REQUIRE_NOTHROW(sides[s]->check_invariants());
            REQUIRE(check_stamps(pool, *sides[s], s, live[s], scratch) == 0);
            REQUIRE(sides[s]->allocated_count() == static_cast<index_t>(live[s].size()));
        }
        // The bands and the gaps between them tile the buffer in order.
        REQUIRE(state.core().byte_high_frontier() <= window.core().byte_low_frontier());
        REQUIRE(window.core().byte_high_frontier() <= full.core().byte_low_frontier());
    }
};

} // namespace

TEST_CASE("layout: N sub-pools run up, floating..., down, each with its position and start",
          "[layout][bands]") {
    const PoolLayout layout(
        1 << 20, {spec("state", 640, 1, GrowDirection::up), floating_spec("window", 16, 16, 0.3),
                  floating_spec("cross", 64, 4, 0.6), spec("full", 32, 16, GrowDirection::down)});
    REQUIRE(layout.sub_pools().size() == 4);
    for (std::size_t i = 0; i < 4; ++i)
        CHECK(layout.sub_pool(i).position == i);
    const auto& window = layout.sub_pool("window");
    CHECK(window.start_page == static_cast<index_t>(0.3 * window.num_physical_pages));
    CHECK(layout.sub_pool("cross").start_page * layout.sub_pool("cross").page_bytes >
          window.start_page * window.page_bytes);
    CHECK(layout.sub_pool("state").start_page == layout.sub_pool("state").min_page_index);
    CHECK(layout.sub_pool("full").start_page == layout.sub_pool("full").num_physical_pages);
    // Two sides keep their positions by direction, in either order.
    const PoolLayout two(
        1 << 20, {spec("swa", 16, 1, GrowDirection::down), spec("full", 32, 1, GrowDirection::up)});
    CHECK(two.sub_pool("full").position == 0);
    CHECK(two.sub_pool("swa").position == 1);
}

TEST_CASE("layout: floating bands of different page sizes start in order, however close their "
          "float_at",
          "[layout][bands]") {
    // Rounded down in its own page size, b's start (0.51 of the buffer, in pages of 500 bytes)
    // would lie below a's (0.5, in pages of 10 bytes): b starts at a's start rounded up instead.
    const PoolLayout layout(4096, {spec("up", 16, 1, GrowDirection::up),
                                   floating_spec("a", 10, 1, 0.5), floating_spec("b", 500, 1, 0.51),
                                   spec("down", 16, 1, GrowDirection::down)});
    const auto start_byte = [&](const char* name) {
        const auto& g = layout.sub_pool(name);
        return g.start_page * g.page_bytes;
    };
    CHECK(start_byte("a") == 2040);
    CHECK(start_byte("b") == 2500);
    CHECK(start_byte("up") <= start_byte("a"));
    CHECK(start_byte("b") <= start_byte("down"));
    // The empty bands as neighbours: in order, and each allocates.
    Pool pool(layout);
    Allocator up(pool, "up", options(CompactionMode::eager)),
        a(pool, "a", options(CompactionMode::eager)), b(pool, "b", options(CompactionMode::eager)),
        down(pool, "down", options(CompactionMode::eager));
    up.bind_neighbour(a);
    a.bind_neighbour(b);
    b.bind_neighbour(down);
    const std::array<Allocator*, 4> sides{&up, &a, &b, &down};
    std::array<std::vector<index_t>, 4> ids;
    for (int i = 0; i < 4; ++i) {
        REQUIRE_NOTHROW(sides[i]->check_invariants());
        const auto got = sides[i]->alloc(Space(), sides[i]->page_size());
        REQUIRE(got.has_value());
        ids[i] = to_host(*got);
        stamp_tokens(pool, *sides[i], i, ids[i]);
    }
    for (int i = 0; i < 4; ++i)
        check_all(pool, *sides[i], i, ids[i]);
}

TEST_CASE("layout: bad band orders are rejected with the sub-pool named",
          "[layout][bands][bad-input]") {
    const auto rejects = [](std::vector<SubPoolSpec> specs, const std::string& named) {
        try {
            PoolLayout(1 << 20, std::move(specs));
            FAIL("no error");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::invalid_argument);
            CHECK(std::string(e.what()).find(named) != std::string::npos);
        }
    };
    rejects({floating_spec("alone", 16, 1, 0.5)}, "alone");
    rejects({spec("a", 16, 1, GrowDirection::up), floating_spec("b", 16, 1, 0.5)}, "b");
    // More than two: up first, down last, floating between, in order.
    rejects({spec("a", 16, 1, GrowDirection::down), floating_spec("b", 16, 1, 0.5),
             spec("c", 16, 1, GrowDirection::up)},
            "a");
    rejects({spec("a", 16, 1, GrowDirection::up), spec("b", 16, 1, GrowDirection::up),
             spec("c", 16, 1, GrowDirection::down)},
            "b");
    rejects({spec("a", 16, 1, GrowDirection::up), floating_spec("b", 16, 1, 0.6),
             floating_spec("c", 16, 1, 0.4), spec("d", 16, 1, GrowDirection::down)},
            "c");
    rejects({spec("a", 16, 1, GrowDirection::up), floating_spec("b", 16, 1, 1.5),
             spec("c", 16, 1, GrowDirection::down)},
            "1.5");
    rejects({spec("a", 16, 1, GrowDirection::up), floating_spec("a", 16, 1, 0.5),
             spec("c", 16, 1, GrowDirection::down)},
            "'a'");
}

TEST_CASE("layout: a fixed split of N sub-pools caps each at its share of the bytes",
          "[layout][bands]") {
    const index_t total = 1 << 20;
    const std::vector<SubPoolSpec> specs = {spec("state", 640, 1, GrowDirection::up),
                                            floating_spec("window", 16, 16, 0.5),
                                            spec("full", 32, 16, GrowDirection::down)};
    const auto layout = PoolLayout::fixed_split(total, specs, {0.2, 0.5, 0.3});
    const double shares[3] = {0.2, 0.5, 0.3};
    index_t capped = 0;
    for (std::size_t i = 0; i < 3; ++i) {
        const SubPoolGeometry& g = layout.sub_pool(i);
        CHECK(g.page_capacity() * g.page_bytes <= static_cast<index_t>(shares[i] * total) + 1);
        CHECK(g.page_capacity() * g.page_bytes >
              static_cast<index_t>(shares[i] * total) - g.page_bytes);
        capped += g.page_capacity() * g.page_bytes;
    }
    CHECK(capped <= total);
    // The window band starts where the state share ends.
    CHECK(layout.sub_pool("window").spec.float_at == 0.2);
    // Two sub-pools: the same layout as the two-sided split.
    const std::vector<SubPoolSpec> two = {spec("full", 64, 1, GrowDirection::up),
                                          spec("swa", 32, 1, GrowDirection::down)};
    const auto a = PoolLayout::fixed_split(total, two, 0.25);
    const auto b = PoolLayout::fixed_split(total, two, std::vector<double>{0.25, 0.75});
    for (std::size_t i = 0; i < 2; ++i)
        CHECK(a.sub_pool(i).num_virtual_pages == b.sub_pool(i).num_virtual_pages);
    // Fractions that do not tile the buffer, or do not match the specs, are refused.
    CHECK_THROWS_AS(PoolLayout::fixed_split(total, specs, {0.2, 0.5, 0.2}), Error);
    CHECK_THROWS_AS(PoolLayout::fixed_split(total, specs, {0.5, 0.5}), Error);
    CHECK_THROWS_AS(PoolLayout::fixed_split(total, specs, {0.0, 0.7, 0.3}), Error);
}

TEST_CASE("bands: a neighbour must be next to the band in the same buffer", "[bands][bad-input]") {
    ThreeBands t(CompactionMode::eager, 1);
    Pool other(PoolLayout(64 * 1024, {spec("state", 640, 1, GrowDirection::up),
                                      floating_spec("window", 16, 1, 0.5),
                                      spec("full", 32, 1, GrowDirection::down)}));
    Allocator stranger(other, "window", options(CompactionMode::eager));
    const std::string before = t.state.state_string();
    CHECK_THROWS_AS(t.state.bind_neighbour(t.full), Error);   // not adjacent
    CHECK_THROWS_AS(t.state.bind_neighbour(stranger), Error); // another buffer
    CHECK_THROWS_AS(t.state.bind_neighbour(t.window), Error); // bound already
    CHECK(t.state.state_string() == before);
    t.check();
}

TEST_CASE("bands: a floating band grows into the wider gap, then the other", "[bands]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        // Starting at a fifth of the buffer, the gap above is the wider one.
        ThreeBands t(mode, 1, 64 * 1024, 0.2);
        const index_t anchor = t.window.core().anchor();
        REQUIRE(t.alloc(1, 100));
        CHECK(t.window.core().anchor() == anchor);
        CHECK(t.window.core().watermark() == anchor + 100);
        // The full side grows down until the gap above is the narrower one.
        const index_t above = t.window.core().gap_above_bytes();
        const index_t below = t.window.core().gap_below_bytes();
        REQUIRE(t.alloc(2, (above - below) / 32 + 64));
        CHECK(t.window.core().gap_above_bytes() < t.window.core().gap_below_bytes());
        REQUIRE(t.alloc(1, 10));
        CHECK(t.window.core().anchor() == anchor - 10);
        t.check();
        // Past both gaps together there is no room, and nothing changes.
        const index_t all = t.window.available_size();
        CHECK(all ==
              (t.window.core().gap_above_bytes() / 16 + t.window.core().gap_below_bytes() / 16));
        const std::string before = t.window.state_string();
        CHECK_FALSE(t.window.alloc(Space(), all + 1).has_value());
        CHECK(t.window.state_string() == before);
        REQUIRE(t.alloc(1, all));
        CHECK(t.window.core().gap_bytes() < 16);
        t.check();
    }
}

TEST_CASE("bands: a state slot the gap cannot hold shifts the floating band away, data intact",
          "[bands][starvation]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (const index_t page_size : {index_t(1), index_t(16)}) {
            CAPTURE(to_string(mode), page_size);
            ThreeBands t(mode, page_size, 64 * 1024, 0.1);
            // The window band starts right above the sink: the state side's
            // gap holds no slot of 640 bytes, while the buffer has plenty.
            REQUIRE(t.alloc(1, 8 * page_size));
            t.check();
            const index_t gap = t.state.core().gap_above_bytes();
            const index_t slots = gap / 640 + 3;
            CHECK(t.state.available_size() == gap / 640);
            CHECK(t.state.schedulable_available_size() >= slots);
            const auto window_ids = t.live[1];
            REQUIRE(t.alloc(0, slots));
            CHECK(t.window.counters().shifts == 1);
            CHECK(t.window.counters().pages_moved > 0);
            CHECK(t.live[1] == window_ids); // the window's ids did not change
            t.check();
            // With the slots freed, the full side pushes the band back down
            // over the state side's room.
            t.free_pages_of(0, t.live[0]);
            if (mode == CompactionMode::lazy)
                t.state.flush(Space(), true);
            REQUIRE(t.full.available_size() < t.full.schedulable_available_size());
            REQUIRE(t.alloc(2, t.full.schedulable_available_size()));
            CHECK(t.window.counters().shifts == 2);
            CHECK(t.live[1] == window_ids);
            t.check();
            // Now the bytes really are not there (the window band cannot move
            // by less than a page): no slot, and nothing changed.
            CHECK(t.state.schedulable_available_size() == 0);
            CHECK(t.state.core().gap_above_bytes() < 640);
            const std::string before = t.window.state_string() + t.state.state_string();
            CHECK_FALSE(t.state.alloc(Space(), 1).has_value());
            CHECK(t.window.state_string() + t.state.state_string() == before);
            t.check();
        }
}

TEST_CASE("bands: a lazy band's shift fills its holes first and drops those on its edge",
          "[bands][lazy]") {
    ThreeBands t(CompactionMode::lazy, 1, 64 * 1024, 0.1);
    REQUIRE(t.alloc(1, 60));
    // Holes across the band: every third token.
    std::vector<index_t> gone;
    for (std::size_t i = 0; i < t.live[1].size(); i += 3)
        gone.push_back(t.live[1][i]);
    t.free_pages_of(1, gone);
    REQUIRE(t.window.core().hole_pages() == 20);
    const index_t watermark = t.window.core().watermark();
    const index_t anchor = t.window.core().anchor();
    const index_t slots = t.state.core().gap_above_bytes() / 640 + 1;
    REQUIRE(t.alloc(0, slots));
    CHECK(t.window.counters().shifts == 1);
    CHECK(t.window.core().anchor() > anchor);
    // The vacated edge's live pages went into the holes before any into the
    // gap above: the band grew only with no hole left.
    CHECK(t.window.counters().pages_moved > 0);
    CHECK(t.window.core().hole_pages() < 20);
    CHECK((t.window.core().watermark() == watermark || t.window.core().hole_pages() == 0));
    t.check();
}

TEST_CASE("bands: no shift inside the floating band's backup window", "[bands][backup]") {
    ThreeBands t(CompactionMode::eager, 1, 64 * 1024, 0.1);
    REQUIRE(t.alloc(1, 40));
    const index_t slots = t.state.core().gap_above_bytes() / 640 + 1;
    const auto snapshot = t.window.backup_state();
    CHECK(t.state.schedulable_available_size() == slots - 1);
    const std::string before = t.window.state_string();
    CHECK_FALSE(t.state.alloc(Space(), slots).has_value());
    CHECK(t.window.state_string() == before);
    t.window.commit_state(snapshot);
    REQUIRE(t.alloc(0, slots));
    t.check();
}

TEST_CASE("bands: a device failure in a call that shifts the floating band changes no band",
          "[bands][device-faults]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (const index_t page_size : {index_t(1), index_t(16)}) {
            CAPTURE(to_string(mode), page_size);
            // The window band low in the buffer with holes (lazy), the full
            // side grown down to leave the window more room below than above.
            const auto make = [&] {
                auto t = std::make_unique<ThreeBands>(mode, page_size, 64 * 1024, 0.1);
                REQUIRE(t->alloc(1, 30 * page_size));
                t->free_pages_of(1, {t->live[1][0], t->live[1][5 * page_size]});
                REQUIRE(t->alloc(2, 40 * page_size));
                return t;
            };
            const std::vector<std::function<void(ThreeBands&)>> calls = {
                // The calls (a CHECK inside would catch the injected fault).
                // A state slot the gap cannot hold: the window shifts up.
                [](ThreeBands& t) {
                    if (!t.state.alloc(Space(), t.state.core().gap_above_bytes() / 640 + 2))
                        FAIL("no state slots");
                },
                // The full side past its gap: the window shifts down.
                [](ThreeBands& t) {
                    if (!t.full.alloc(Space(), t.full.schedulable_available_size()))
                        FAIL("no full tokens");
                },
            };
            for (const auto& call : calls) {
                const std::uint64_t tried = for_each_device_fault(
                    [&] {
                        auto t = make();
                        device_faults::reset();
                        call(*t);
                        CHECK(t->window.counters().shifts == 1);
                    },
                    [&](DeviceOp op, std::uint64_t n, std::uint64_t) {
                        auto t = make();
                        device_faults::fail_nth(op, n);
                        expect_unchanged(t->pool,
                                         {{t->state, 0, t->live[0]},
                                          {t->window, 1, t->live[1]},
                                          {t->full, 2, t->live[2]}},
                                         ErrorCode::device, [&] { call(*t); });
                        device_faults::reset();
                        call(*t);
                        CHECK(t->window.counters().shifts == 1);
                        for (int s = 0; s < 3; ++s)
                            REQUIRE_NOTHROW(t->sides[s]->check_invariants());
                    });
                CHECK(tried > 0);
            }
        }
}

TEST_CASE("bands: randomised three-band run, invariants and data after every step",
          "[bands][randomised]") {
    const RandomisedTestConfig& config = randomised_config();
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (const index_t page_size : {index_t(1), index_t(16)}) {
            index_t shifts = 0, promised = 0, failed = 0;
            for (const std::uint64_t seed : config.seed_list()) {
                INFO("seed " << seed << " (--kvpool-seed " << seed << "), mode " << to_string(mode)
                             << ", page size " << page_size);
                Rng rng(seed);
                // Small enough to fill within a few hundred operations.
                ThreeBands t(mode, page_size, page_size == 1 ? 16 * 1024 : 64 * 1024,
                             0.1 + 0.8 * static_cast<double>(rng.uniform(0, 100)) / 100);
                std::vector<std::shared_ptr<SelfCompletingToken>> forwards;
                for (int op = 0; op < config.ops; ++op) {
                    const int s = static_cast<int>(rng.uniform(0, 2));
                    Allocator& side = *t.sides[s];
                    const index_t ps = side.page_size();
                    const index_t roll = rng.uniform(0, 99);
                    if (roll < 50) {
                        const index_t tokens = rng.uniform(1, s == 0 ? 3 : 12) * ps;
                        const bool promise = tokens <= side.schedulable_available_size();
                        const bool ok = t.alloc(s, tokens);
                        promised += promise ? 1 : 0;
                        failed += ok ? 0 : 1;
                        if (promise)
                            REQUIRE(ok);
                    } else if (roll < 85) {
                        if (t.live[s].empty())
                            continue;
                        std::vector<index_t> tokens;
                        const index_t n = rng.uniform(1, 8);
                        for (index_t i = 0; i < n; ++i)
                            tokens.push_back(rng.pick(t.live[s]));
                        t.free_pages_of(s, tokens);
                    } else if (mode == CompactionMode::eager) {
                        continue;
                    } else if (roll < 90) {
                        side.flush(Space(), rng.chance(0.5));
                    } else if (roll < 95) {
                        // A forward pass reads every side's pages until its token completes.
                        forwards.push_back(std::make_shared<SelfCompletingToken>());
                        for (Allocator* a : t.sides)
                            a->set_latest_forward_done(forwards.back());
                    } else if (!forwards.empty()) {
                        const auto i = static_cast<std::size_t>(
                            rng.uniform(0, static_cast<index_t>(forwards.size()) - 1));
                        forwards[i]->complete();
                        forwards.erase(forwards.begin() + static_cast<std::ptrdiff_t>(i));
                        side.drain_pending_reuse();
                    }
                    t.check();
                }
                shifts += t.window.counters().shifts;
            }
            fmt::print("bands randomised, {} page size {}: {} seeds x {} operations, {} shifts, "
                       "{} allocations within schedulable_available_size(), {} without room\n",
                       to_string(mode), page_size, config.seed_list().size(), config.ops, shifts,
                       promised, failed);
            CHECK(shifts > 0);
            CHECK(failed > 0);
        }
}
