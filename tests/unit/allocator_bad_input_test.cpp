// Misuse gets a clear error and changes nothing; running out of room is a
// normal "no allocation". Each case ends with the invariants and the data check.
#include <kvpool/detail/allocator_core.hpp>

#include "test_support.hpp"

#include <cstdint>
#include <functional>
#include <limits>

using namespace kvpool;
using namespace kvpool::test;

namespace {

struct Fixture {
    Pool pool;
    Allocator up;
    Allocator down;
    std::vector<index_t> up_live;
    std::vector<index_t> down_live;
    Fixture(CompactionMode mode, index_t page_size)
        : pool(PoolLayout(32 * 1024, {spec("full", 16, page_size, GrowDirection::up),
                                      spec("swa", 8, page_size, GrowDirection::down)})),
          up(pool, "full", options(mode)), down(pool, "swa", options(mode)) {
        up.bind_peer(down);
        up_live = to_host(*up.alloc(Space(), 8 * page_size));
        // More pages than the up side holds, so some down ids are not up ids.
        down_live = to_host(*down.alloc(Space(), 12 * page_size));
        stamp_tokens(pool, up, 0, up_live);
        stamp_tokens(pool, down, 1, down_live);
    }
    // The call must throw an Error with this code and leave both sides as they were.
    void expect_rejected(ErrorCode code, const std::function<void()>& call,
                         const std::string& named = "") {
        const std::string up_before = up.state_string(), down_before = down.state_string();
        try {
            call();
            FAIL("accepted");
        } catch (const Error& e) {
            CHECK(e.code() == code);
            if (!named.empty())
                CHECK(std::string(e.what()).find(named) != std::string::npos);
        }
        CHECK(up.state_string() == up_before);
        CHECK(down.state_string() == down_before);
        check_all(pool, up, 0, up_live);
        check_all(pool, down, 1, down_live);
    }
};

} // namespace

TEST_CASE("bad input: frees of ids that are not live on this side", "[bad-input]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (index_t ps : {index_t(1), index_t(16)}) {
            Fixture f(mode, ps);
            const index_t never = f.up_live.back() + 5 * ps;
            f.expect_rejected(
                ErrorCode::not_allocated, [&] { f.up.free(Space(), {never}); },
                std::to_string(never));
            // The other side's ids: the down side's pages are not bound up here.
            f.expect_rejected(ErrorCode::not_allocated,
                              [&] { f.up.free(Space(), {f.down_live.back()}); });
            // Outside the id space, negative, or in the padding sink.
            f.expect_rejected(ErrorCode::out_of_range, [&] { f.up.free(Space(), {1 << 30}); });
            f.expect_rejected(ErrorCode::out_of_range, [&] { f.up.free(Space(), {-3}); });
            f.expect_rejected(ErrorCode::out_of_range, [&] { f.up.free(Space(), {0}); });
            // The widest ids, alone and in runs that wrap from the largest id
            // to the smallest: refused, not overflowed into the id space.
            constexpr index_t most = std::numeric_limits<index_t>::max();
            constexpr index_t least = std::numeric_limits<index_t>::min();
            for (const std::vector<index_t>& wild : {std::vector<index_t>{most - 1, most},
                                                     {most, least},
                                                     {least, least + 1},
                                                     {most, least, least + 1, least + 2},
                                                     {f.up_live[0], most}})
                f.expect_rejected(ErrorCode::out_of_range, [&] { f.up.free(Space(), wild); });
            // One bad id spoils the whole call: the good ones stay allocated.
            f.expect_rejected(ErrorCode::not_allocated, [&] {
                f.up.free(Space(), {f.up_live[0], never});
            });
            const index_t freed = f.up_live[0];
            f.up.free(Space(), {freed});
            f.up_live.erase(f.up_live.begin(), f.up_live.begin() + ps);
            f.expect_rejected(ErrorCode::not_allocated, [&] { f.up.free(Space(), {freed}); });
            check_all(f.pool, f.up, 0, f.up_live);
        }
}

TEST_CASE("bad input: binding a bound side again", "[bad-input]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        Fixture f(mode, 4);
        // SGLang's pairing, a.bind_peer(b); b.bind_peer(a): the second call,
        // and any repeat, finds the two bound to each other and changes nothing.
        const std::string up_before = f.up.state_string(), down_before = f.down.state_string();
        const auto up_v2p = f.up.virtual_to_physical().data();
        f.down.bind_peer(f.up);
        f.up.bind_peer(f.down);
        CHECK(f.up.state_string() == up_before);
        CHECK(f.down.state_string() == down_before);
        CHECK(f.up.virtual_to_physical().data() == up_v2p);
        check_all(f.pool, f.up, 0, f.up_live);
        check_all(f.pool, f.down, 1, f.down_live);
        // Another side of the same buffer: refused both ways, naming the rule.
        Allocator other(f.pool, "swa", options(mode));
        f.expect_rejected(
            ErrorCode::invalid_argument, [&] { f.up.bind_peer(other); }, "one peer only");
        f.expect_rejected(
            ErrorCode::invalid_argument, [&] { other.bind_peer(f.down); }, "one peer only");
        CHECK(f.up.is_peer_of(f.down));
        CHECK(f.down.is_peer_of(f.up));
        CHECK_FALSE(other.has_peer());
    }
}

TEST_CASE("bad input: sizes that are not page multiples or negative", "[bad-input]") {
    Fixture f(CompactionMode::eager, 16);
    f.expect_rejected(
        ErrorCode::misaligned, [&] { f.up.alloc(Space(), 17); }, "17");
    f.expect_rejected(ErrorCode::misaligned, [&] { f.up.alloc(Space(), -16); });
    IndexView out("out", 3);
    f.expect_rejected(ErrorCode::invalid_argument, [&] {
        f.up.alloc_extend(Space(), {0}, {3}, to_device({-1, -1}), out); // last_loc of length 2
    });
    f.expect_rejected(
        ErrorCode::invalid_argument,
        [&] { f.up.alloc_extend(Space(), {5}, {3}, to_device({-1}), out); }, "prefix_len 5");
    f.expect_rejected(
        ErrorCode::invalid_argument,
        [&] { f.up.alloc_extend(Space(), {0}, {4}, to_device({-1}), out); }, "expected length 4");
    IndexView one("one", 1);
    f.expect_rejected(ErrorCode::invalid_argument,
                      [&] { f.up.alloc_decode(Space(), {0}, to_device({f.up_live.back()}), one); });
}

TEST_CASE("bad input: calls that do not fit the side's role", "[bad-input]") {
    Pool pool(PoolLayout(32 * 1024, {spec("full", 16, 1, GrowDirection::up),
                                     spec("swa", 8, 1, GrowDirection::down)}));
    Allocator full(pool, "full");
    Allocator swa(pool, "swa", options(CompactionMode::eager, false));
    full.bind_peer(swa);
    auto ids = to_host(*full.alloc(Space(), 8));
    std::vector<index_t> pages(ids.begin(), ids.end());
    CHECK_THROWS_AS(swa.alloc(Space(), 4), Error);
    CHECK_THROWS_AS(full.alloc_with_virtual(Space(), pages), Error);
    REQUIRE(swa.alloc_with_virtual(Space(), pages));
    // Binding the same virtual pages twice is refused.
    CHECK_THROWS_AS(swa.alloc_with_virtual(Space(), {pages[0]}), Error);
    CHECK_THROWS_AS(swa.alloc_with_virtual(Space(), {0}), Error); // the padding anchor
    // The non-owner's table spans the owner's id space.
    CHECK(swa.virtual_to_physical().extent(0) == full.virtual_to_physical().extent(0));
    CHECK_THROWS_AS(full.bind_peer(full), Error);
    stamp_tokens(pool, full, 0, ids);
    stamp_tokens(pool, swa, 1, ids);
    check_all(pool, full, 0, ids);
    check_all(pool, swa, 1, ids);
}

TEST_CASE("bad input: requests beyond capacity are a clean no-allocation", "[bad-input]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        Fixture f(mode, 16);
        const std::string up_before = f.up.state_string();
        const index_t down_live = f.down.allocated_count();
        CHECK_FALSE(f.up.alloc(Space(), f.up.available_size() + 16).has_value());
        CHECK_FALSE(f.up.alloc(Space(), index_t(1) << 40).has_value());
        CHECK(f.up.state_string() == up_before);
        // Fill the side, then a decode step that needs a new page has no room.
        auto rest = to_host(*f.up.alloc(Space(), f.up.available_size()));
        stamp_tokens(f.pool, f.up, 0, rest);
        f.up_live.insert(f.up_live.end(), rest.begin(), rest.end());
        const std::string full_state = f.up.state_string();
        IndexView out("out", 1);
        // The first request holds 128 tokens (8 whole pages): token 129 needs a page.
        CHECK_FALSE(f.up.alloc_decode(Space(), {129}, to_device({f.up_live[127]}), out));
        CHECK(f.up.state_string() == full_state);
        CHECK(f.down.allocated_count() == down_live);
        CHECK(f.up.counters().failed_allocs == 3);
        check_all(f.pool, f.up, 0, f.up_live);
        check_all(f.pool, f.down, 1, f.down_live);
    }
}

TEST_CASE("bad input: a band of more pages than the host mirror's 32-bit ids is refused",
          "[bad-input]") {
    // 2^31 + 16 one-byte pages: a layout only (no buffer), as a core is built from.
    const index_t pages = (index_t(1) << 31) + 16;
    const PoolLayout huge(pages, {spec("full", 1, 1, GrowDirection::up)});
    REQUIRE(huge.sub_pool("full").num_physical_pages > std::numeric_limits<std::int32_t>::max());
    try {
        detail::AllocatorCore core(huge.sub_pool("full"), huge.total_bytes(),
                                   options(CompactionMode::eager));
        FAIL("accepted");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::invalid_argument);
        CHECK(std::string(e.what()).find("at most 2147483647") != std::string::npos);
    }
    // One page size up, the same bytes are half the pages: accepted.
    const PoolLayout halved(pages, {spec("full", 1, 2, GrowDirection::up)});
    CHECK(halved.sub_pool("full").num_physical_pages <= std::numeric_limits<std::int32_t>::max());
}
