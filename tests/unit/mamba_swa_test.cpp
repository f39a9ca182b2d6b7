// The tri-pool (state slots, sliding-window KV floating, full KV in one
// buffer): bad construction, misuse, the starvation case and clear(). Its
// randomised run is the differential test against the reference model
// (tri_pool_differential_test.cpp).
#include "atomicity_harness.hpp"
#include "test_support.hpp"

#include <kvpool/error.hpp>
#include <kvpool/mamba_swa_allocator.hpp>

#include <algorithm>
#include <functional>

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
            "the SWA side's page size 16 does not divide the full side's 1");
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
            const SubPoolGeometry& swa = e.tri.swa().geometry();
            CHECK(e.tri.swa().core().anchor() == std::max(swa.start_page, swa.min_page_index));
            e.check();
        }
}
