// The tri-pool (state slots, sliding-window KV floating, full KV in one
// buffer): bad construction, the starvation case, and a randomised run with
// invariants, the stamped-data check of all three kinds and the capacity
// views' promises after every step.
#include "atomicity_harness.hpp"
#include "self_completing_token.hpp"
#include "test_config.hpp"
#include "test_random.hpp"
#include "test_support.hpp"

#include <kvpool/error.hpp>
#include <kvpool/mamba_swa_allocator.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <memory>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using TriPool = UnifiedMambaSWAAllocator<Space>;

PoolLayout tri_layout(index_t page_size, index_t bytes, double float_at) {
    return PoolLayout(bytes, {spec("mamba", 1024, 1, GrowDirection::up),
                              floating_spec("swa", 16, page_size, float_at),
                              spec("full", 32, page_size, GrowDirection::down)});
}

constexpr int full_tag = 0, swa_tag = 1, state_tag = 2;

// A tri-pool with the engine's record: requests (full ids, those still in the
// window) and state slots, every one stamped.
struct Engine {
    struct Request {
        std::vector<index_t> tokens, in_window;
    };
    Pool pool;
    TriPool tri;
    std::vector<Request> requests;
    std::vector<index_t> slots;
    DataCheckScratch scratch;

    Engine(CompactionMode mode, index_t page_size, index_t bytes, double float_at)
        : pool(tri_layout(page_size, bytes, float_at)), tri(pool, mode) {}

    bool alloc(index_t tokens) {
        const auto ids = tri.alloc(Space(), tokens);
        if (!ids)
            return false;
        Request r;
        r.tokens = to_host(*ids);
        r.in_window = r.tokens;
        stamp_tokens(pool, tri.full(), full_tag, r.tokens, scratch);
        stamp_tokens(pool, tri.swa(), swa_tag, r.tokens, scratch);
        requests.push_back(std::move(r));
        return true;
    }
    bool alloc_slots(index_t count) {
        const auto ids = tri.alloc_state_slots(Space(), count);
        if (!ids)
            return false;
        const std::vector<index_t> fresh = to_host(*ids);
        stamp_tokens(pool, tri.state(), state_tag, fresh, scratch);
        slots.insert(slots.end(), fresh.begin(), fresh.end());
        return true;
    }
    void free_request(std::size_t i) {
        tri.free(Space(), requests[i].tokens);
        requests.erase(requests.begin() + static_cast<std::ptrdiff_t>(i));
    }
    // The request's oldest page leaves the window.
    void leave_window(std::size_t i) {
        auto& w = requests[i].in_window;
        const auto n = std::min<std::size_t>(w.size(), static_cast<std::size_t>(tri.page_size()));
        const std::vector<index_t> gone(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(n));
        tri.free_swa(Space(), gone);
        w.erase(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(n));
    }
    void free_slot(std::size_t i) {
        tri.free_state_slots(Space(), {slots[i]});
        slots.erase(slots.begin() + static_cast<std::ptrdiff_t>(i));
    }
    void check() {
        REQUIRE_NOTHROW(tri.check_invariants());
        std::vector<index_t> full, window;
        for (const auto& r : requests) {
            full.insert(full.end(), r.tokens.begin(), r.tokens.end());
            window.insert(window.end(), r.in_window.begin(), r.in_window.end());
        }
        REQUIRE(check_stamps(pool, tri.full(), full_tag, full, scratch) == 0);
        REQUIRE(check_stamps(pool, tri.swa(), swa_tag, window, scratch) == 0);
        REQUIRE(check_stamps(pool, tri.state(), state_tag, slots, scratch) == 0);
        REQUIRE(tri.full().allocated_count() == static_cast<index_t>(full.size()));
        REQUIRE(tri.swa().allocated_count() == static_cast<index_t>(window.size()));
        REQUIRE(tri.state().allocated_count() == static_cast<index_t>(slots.size()));
    }
};

} // namespace

TEST_CASE("tri-pool: a layout it cannot use is refused with the reason", "[tri-pool][bad-input]") {
    const auto refused = [](const PoolLayout& layout, const std::string& reason) {
        Pool pool(layout);
        try {
            TriPool tri(pool, CompactionMode::eager);
            FAIL("accepted");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::invalid_argument);
            CHECK(std::string(e.what()).find(reason) != std::string::npos);
        }
    };
    refused(PoolLayout(1 << 20, {spec("mamba", 1024, 1, GrowDirection::up),
                                 floating_spec("swa", 16, 16, 0.5),
                                 spec("full", 32, 1, GrowDirection::down)}),
            "page sizes differ");
    refused(PoolLayout(1 << 20,
                       {spec("mamba", 1024, 2, GrowDirection::up), floating_spec("swa", 16, 1, 0.5),
                        spec("full", 32, 1, GrowDirection::down)}),
            "page size 1");
    refused(PoolLayout(1 << 20,
                       {spec("full", 32, 1, GrowDirection::up), floating_spec("swa", 16, 1, 0.5),
                        spec("mamba", 1024, 1, GrowDirection::down)}),
            "must grow");
}

TEST_CASE("tri-pool: misuse is a clear error that changes no band", "[tri-pool][bad-input]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        CAPTURE(to_string(mode));
        Engine e(mode, 16, 256 * 1024, 0.3);
        REQUIRE(e.alloc(64));
        REQUIRE(e.alloc(32));
        REQUIRE(e.alloc_slots(3));
        e.leave_window(0);
        std::vector<index_t> full, window;
        for (const auto& r : e.requests) {
            full.insert(full.end(), r.tokens.begin(), r.tokens.end());
            window.insert(window.end(), r.in_window.begin(), r.in_window.end());
        }
        const std::vector<Watched> all = {{e.tri.full(), full_tag, full},
                                          {e.tri.swa(), swa_tag, window},
                                          {e.tri.state(), state_tag, e.slots}};
        const auto check_all_unchanged = [&](ErrorCode code, const std::function<void()>& call) {
            expect_unchanged(e.pool, all, code, call);
            e.check();
        };
        const index_t unused = e.tri.full().core().free_virtual_pages().front() * 16;
        check_all_unchanged(ErrorCode::misaligned, [&] { e.tri.alloc(Space(), 17); });
        check_all_unchanged(ErrorCode::not_allocated, [&] { e.tri.free(Space(), {unused}); });
        check_all_unchanged(ErrorCode::not_allocated, [&] {
            e.tri.free_swa(Space(), {e.requests[0].tokens[0], unused});
        });
        check_all_unchanged(ErrorCode::not_allocated, [&] {
            e.tri.free_state_slots(Space(), {e.slots[0], e.slots[0] + 100});
        });
        check_all_unchanged(ErrorCode::out_of_range, [&] { e.tri.free(Space(), {-5}); });
        // A snapshot from another window, and one made stale by a restore.
        const MambaSWASnapshot first = e.tri.backup_state();
        e.tri.restore_state(Space(), first);
        check_all_unchanged(ErrorCode::invalid_state, [&] { e.tri.restore_state(Space(), first); });
        check_all_unchanged(ErrorCode::invalid_state, [&] { e.tri.commit_state(first); });
        // Inside a window, frees are refused on every side.
        const MambaSWASnapshot open = e.tri.backup_state();
        check_all_unchanged(ErrorCode::invalid_state,
                            [&] { e.tri.free(Space(), e.requests[1].tokens); });
        e.tri.commit_state(open);
        e.check();
    }
}

TEST_CASE("tri-pool: a state slot the two-band design would starve is served, data intact",
          "[tri-pool][starvation]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (const index_t page_size : {index_t(1), index_t(16)}) {
            CAPTURE(to_string(mode), page_size);
            // The window band starts low: the gap next to the state slots holds
            // none of 1 KiB, while the buffer has room for many.
            Engine e(mode, page_size, 256 * 1024, 0.05);
            REQUIRE(e.alloc(8 * page_size));
            REQUIRE(e.alloc_slots(e.tri.state().available_size()));
            REQUIRE(e.tri.state().available_size() == 0);
            REQUIRE(e.tri.state_slots_available() > 4);
            REQUIRE(e.alloc_slots(4));
            CHECK(e.tri.swa().counters().shifts > 0);
            e.check();
            // KV fills what is left; then a slot fails only with the bytes gone.
            while (e.alloc(page_size))
                e.check();
            e.check();
            // An allocation undone because one side could not bind counts as failed.
            for (const auto* side : {&e.tri.full(), &e.tri.swa(), &e.tri.state()})
                CHECK(side->counters().pages_allocated - side->counters().pages_freed ==
                      side->core().live_pages());
            CHECK(e.tri.full().counters().failed_allocs + e.tri.swa().counters().failed_allocs > 0);
            const std::string before = e.tri.state().state_string() + e.tri.swa().state_string();
            if (!e.alloc_slots(1)) {
                CHECK(e.tri.state_slots_available() == 0);
                CHECK(e.tri.state().state_string() + e.tri.swa().state_string() == before);
            }
            e.check();
            // Cleared, the window band starts where the layout says again.
            e.tri.clear(Space());
            e.requests.clear();
            e.slots.clear();
            const SideGeometry& swa = e.tri.swa().geometry();
            CHECK(e.tri.swa().core().anchor() == std::max(swa.start_page, swa.min_page_index));
            e.check();
        }
}

TEST_CASE("tri-pool: randomised run, invariants, data and capacity promises after every step",
          "[tri-pool][randomised]") {
    const RandomisedTestConfig& config = randomised_config();
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (const index_t page_size : {index_t(1), index_t(16)}) {
            index_t shifts = 0, kv_failed = 0, slot_failed = 0, windows = 0, kv_beyond = 0,
                    slot_beyond = 0;
            for (const std::uint64_t seed : config.seed_list()) {
                INFO("seed " << seed << " (--kvpool-seed " << seed << "), mode " << to_string(mode)
                             << ", page size " << page_size);
                Rng rng(seed);
                Engine e(mode, page_size, 128 * 1024,
                         0.1 + 0.8 * static_cast<double>(rng.uniform(0, 100)) / 100);
                std::vector<std::shared_ptr<SelfCompletingToken>> forwards;
                for (int op = 0; op < config.ops; ++op) {
                    const index_t roll = rng.uniform(0, 99);
                    if (roll < 30) {
                        // 16 to 192 tokens whatever the page size: the pool fills
                        // within a few hundred operations.
                        const index_t tokens = rng.uniform(1, 12) * 16;
                        const bool promised = tokens <= e.tri.available_size();
                        const bool ok = e.alloc(tokens);
                        kv_failed += ok ? 0 : 1;
                        kv_beyond += ok && !promised ? 1 : 0;
                        if (promised)
                            REQUIRE(ok);
                    } else if (roll < 40) {
                        const index_t count = rng.uniform(1, 3);
                        const bool promised = count <= e.tri.state_slots_available();
                        const bool ok = e.alloc_slots(count);
                        slot_failed += ok ? 0 : 1;
                        slot_beyond += ok && !promised ? 1 : 0;
                        if (promised)
                            REQUIRE(ok);
                    } else if (roll < 52) {
                        if (!e.requests.empty())
                            e.free_request(static_cast<std::size_t>(
                                rng.uniform(0, static_cast<index_t>(e.requests.size()) - 1)));
                    } else if (roll < 60) {
                        // Requests finishing in one step: their KV and slots compact together.
                        e.tri.free_group_begin();
                        for (int k = 0; k < 2 && !e.requests.empty(); ++k)
                            e.free_request(static_cast<std::size_t>(
                                rng.uniform(0, static_cast<index_t>(e.requests.size()) - 1)));
                        if (!e.slots.empty())
                            e.free_slot(0);
                        e.tri.free_group_end(Space());
                    } else if (roll < 72) {
                        if (!e.requests.empty())
                            e.leave_window(static_cast<std::size_t>(
                                rng.uniform(0, static_cast<index_t>(e.requests.size()) - 1)));
                    } else if (roll < 82) {
                        if (!e.slots.empty())
                            e.free_slot(static_cast<std::size_t>(
                                rng.uniform(0, static_cast<index_t>(e.slots.size()) - 1)));
                    } else if (roll < 86) {
                        // Speculative decoding: allocations undone or kept.
                        ++windows;
                        const auto requests = e.requests.size();
                        const auto slots = e.slots.size();
                        const MambaSWASnapshot snapshot = e.tri.backup_state();
                        e.alloc(page_size);
                        e.alloc_slots(1);
                        e.check();
                        if (rng.chance(0.5)) {
                            e.tri.restore_state(Space(), snapshot);
                            e.requests.resize(requests);
                            e.slots.resize(slots);
                        } else {
                            e.tri.commit_state(snapshot);
                        }
                    } else if (mode == CompactionMode::eager) {
                        continue;
                    } else if (roll < 90) {
                        e.tri.flush_opportunistic(Space());
                    } else if (roll < 95) {
                        forwards.push_back(std::make_shared<SelfCompletingToken>());
                        e.tri.set_latest_forward_done(forwards.back());
                        if (!e.requests.empty())
                            e.tri.set_inflight_forward(forwards.back(), e.requests.back().tokens);
                    } else if (!forwards.empty()) {
                        const auto i = static_cast<std::size_t>(
                            rng.uniform(0, static_cast<index_t>(forwards.size()) - 1));
                        forwards[i]->complete();
                        forwards.erase(forwards.begin() + static_cast<std::ptrdiff_t>(i));
                        e.tri.drain_pending_reuse();
                    }
                    e.check();
                }
                shifts += e.tri.swa().counters().shifts;
            }
            fmt::print("tri-pool randomised, {} page size {}: {} seeds x {} operations, {} band "
                       "shifts, {} backup windows; KV allocations without room {}, beyond "
                       "available_size() {}; state-slot allocations without room {}, beyond "
                       "state_slots_available() {}\n",
                       to_string(mode), page_size, config.seed_list().size(), config.ops, shifts,
                       windows, kv_failed, kv_beyond, slot_failed, slot_beyond);
            CHECK(shifts > 0);
            CHECK(kv_failed > 0);
        }
}
