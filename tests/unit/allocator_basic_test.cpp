// The allocator behaviours SGLang's own unit tests check, page size 1.
#include "test_support.hpp"

#include <algorithm>
#include <numeric>
#include <set>

using namespace kvpool;
using namespace kvpool::test;

namespace {

struct TwoSided {
    Pool pool;
    Allocator up;
    Allocator down;
    TwoSided(CompactionMode mode, index_t page_size, index_t bytes = 64 * 1024)
        : pool(PoolLayout(bytes, {spec("full", 32, page_size, GrowDirection::up),
                                  spec("swa", 16, page_size, GrowDirection::down)})),
          up(pool, "full", options(mode)), down(pool, "swa", options(mode)) {
        up.bind_peer(down);
    }
};

std::vector<index_t> alloc_tokens(Allocator& a, index_t n) {
    auto ids = a.alloc(Space(), n);
    REQUIRE(ids.has_value());
    return to_host(*ids);
}

void erase_tokens(std::vector<index_t>& live, const std::vector<index_t>& gone) {
    const std::set<index_t> g(gone.begin(), gone.end());
    live.erase(std::remove_if(live.begin(), live.end(), [&](index_t t) { return g.count(t) != 0; }),
               live.end());
}

} // namespace

TEST_CASE("basic: v2p and p2v stay inverse and data follows every eager relocation", "[basic]") {
    TwoSided t(CompactionMode::eager, 1);
    std::vector<index_t> live = alloc_tokens(t.up, 40);
    stamp_tokens(t.pool, t.up, 0, live);
    check_all(t.pool, t.up, 0, live);
    // Free every third token: the survivors at the frontier move into the holes.
    std::vector<index_t> gone;
    for (std::size_t i = 0; i < live.size(); i += 3)
        gone.push_back(live[i]);
    t.up.free(Space(), gone);
    erase_tokens(live, gone);
    CHECK(t.up.counters().pages_moved > 0);
    CHECK(t.up.allocated_count() == static_cast<index_t>(live.size()));
    check_all(t.pool, t.up, 0, live);
}

TEST_CASE("basic: eager mode leaves no holes; free ids and live ids cover the id space",
          "[basic]") {
    TwoSided t(CompactionMode::eager, 1);
    std::vector<index_t> live = alloc_tokens(t.up, 100);
    stamp_tokens(t.pool, t.up, 0, live);
    std::vector<index_t> gone(live.begin() + 10, live.begin() + 60);
    t.up.free(Space(), gone);
    erase_tokens(live, gone);
    const auto& core = t.up.core();
    CHECK(core.hole_pages() == 0);
    CHECK(core.band_pages() == static_cast<index_t>(live.size()));
    CHECK(core.free_virtual_page_count() + core.live_pages() == t.up.geometry().page_capacity());
    // The physical band is dense: pages [min, min + live).
    auto v2p = to_host(t.up.virtual_to_physical());
    std::set<index_t> physical;
    for (index_t v : live)
        physical.insert(v2p[v]);
    CHECK(*physical.begin() == t.up.geometry().min_page_index);
    CHECK(*physical.rbegin() ==
          t.up.geometry().min_page_index + static_cast<index_t>(live.size()) - 1);
    check_all(t.pool, t.up, 0, live);
}

TEST_CASE("basic: translate into a caller buffer in place keeps the buffer", "[basic][translate]") {
    TwoSided t(CompactionMode::eager, 1);
    std::vector<index_t> live = alloc_tokens(t.up, 32);
    stamp_tokens(t.pool, t.up, 0, live);
    IndexView buffer = to_device(live);
    const index_t* address = buffer.data();
    auto expected = to_host(t.up.translate(Space(), buffer));
    t.up.translate(Space(), buffer, buffer);
    CHECK(buffer.data() == address);
    CHECK(to_host(buffer) == expected);
    // A buffer of another length is refused, not resized.
    IndexView wrong("wrong", live.size() + 1);
    CHECK_THROWS_AS(t.up.translate(Space(), to_device(live), wrong), Error);
    check_all(t.pool, t.up, 0, live);
}

TEST_CASE("basic: freed ids translate to the sink and v2p[0] stays 0", "[basic][translate]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        TwoSided t(mode, 1);
        std::vector<index_t> live = alloc_tokens(t.up, 20);
        stamp_tokens(t.pool, t.up, 0, live);
        std::vector<index_t> gone(live.begin(), live.begin() + 5);
        t.up.free(Space(), gone);
        erase_tokens(live, gone);
        auto physical = to_host(t.up.translate(Space(), to_device(gone)));
        for (index_t p : physical)
            CHECK(p == 0);
        CHECK(to_host(t.up.virtual_to_physical())[0] == 0);
        // Padding ids (-1, 0) clamp to the sink too.
        auto padding = to_host(t.up.translate(Space(), to_device({-1, 0})));
        CHECK(padding == std::vector<index_t>{0, 0});
        check_all(t.pool, t.up, 0, live);
    }
}

TEST_CASE("basic: double free raises and changes nothing", "[basic][bad-input]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        TwoSided t(mode, 1);
        std::vector<index_t> live = alloc_tokens(t.up, 10);
        stamp_tokens(t.pool, t.up, 0, live);
        t.up.free(Space(), {live[3]});
        const std::string before = t.up.state_string();
        try {
            t.up.free(Space(), {live[4], live[3]});
            FAIL("double free accepted");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::not_allocated);
            CHECK(std::string(e.what()).find(std::to_string(live[3])) != std::string::npos);
        }
        CHECK(t.up.state_string() == before);
        erase_tokens(live, {live[3]});
        check_all(t.pool, t.up, 0, live);
    }
}

TEST_CASE("basic: both sides grow toward each other and share the gap", "[basic][peer]") {
    TwoSided t(CompactionMode::eager, 1, 16 * 1024);
    const index_t gap_before = t.up.core().gap_bytes();
    CHECK(gap_before == t.down.core().gap_bytes());
    std::vector<index_t> full = alloc_tokens(t.up, 100);
    std::vector<index_t> swa = alloc_tokens(t.down, 200);
    stamp_tokens(t.pool, t.up, 0, full);
    stamp_tokens(t.pool, t.down, 1, swa);
    CHECK(t.up.core().gap_bytes() == gap_before - 100 * 32 - 200 * 16);
    // Fill the rest: the two bands meet and neither side can grow further.
    const index_t rest = t.down.available_size();
    std::vector<index_t> more = alloc_tokens(t.down, rest);
    swa.insert(swa.end(), more.begin(), more.end());
    stamp_tokens(t.pool, t.down, 1, more);
    CHECK(t.up.available_size() == 0);
    CHECK_FALSE(t.up.alloc(Space(), 1).has_value());
    CHECK(t.up.counters().failed_allocs == 1);
    // Freeing on one side gives the other room again.
    std::vector<index_t> gone(swa.begin(), swa.begin() + 64);
    t.down.free(Space(), gone);
    erase_tokens(swa, gone);
    CHECK(t.up.available_size() == 64 * 16 / 32);
    check_all(t.pool, t.up, 0, full);
    check_all(t.pool, t.down, 1, swa);
}
