// Byte conservation over a whole unified buffer: every byte is in exactly one
// of live pages, holes, pages pending reuse, gaps, the padding sink and the
// alignment at the ends (detail::BufferBytes), and check_invariants() fails,
// naming every term, when they do not add up to the buffer. Here: the account
// of a known state, term by term, and a band moved off its anchor through the
// test seam (bytes then belong to no term). That the account holds across
// random allocations, frees, flushes and band shifts is checked after every
// step of the differential runs (tests/differential_harness.hpp:
// compare_buffer_bytes(), term by term against the reference model).
#include "core_test_access.hpp"
#include "test_support.hpp"

#include <kvpool/mamba_swa_allocator.hpp>

#include <fmt/format.h>

#include <string>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using Seam = detail::AllocatorCoreTestAccess;
using TriPool = UnifiedMambaSWAAllocator<Space>;

index_t band_bytes(const Allocator& side) {
    const auto& c = side.core();
    return (c.live_pages() + c.hole_pages() + c.pending_reuse_pages()) * side.geometry().page_bytes;
}

// check_invariants() fails with the byte account named term by term, lost_bytes
// short of the buffer; once the band is moved back it passes again.
void expect_account_broken(const Allocator& moved, index_t by, index_t lost_bytes,
                           const Allocator& checked) {
    const index_t buffer = checked.core().buffer_bytes().buffer;
    Seam::move_band(moved.core(), by);
    CHECK(checked.core().buffer_bytes().accounted() == buffer - lost_bytes);
    try {
        checked.check_invariants();
        FAIL("a band off its anchor passed check_invariants()");
    } catch (const Error& e) {
        const std::string what = e.what();
        INFO(what);
        CHECK(e.code() == ErrorCode::internal);
        for (const char* term : {"byte conservation", "live ", "holes ", "pending ", "gaps ",
                                 "sink ", "alignment ", "overlap "})
            CHECK(what.find(term) != std::string::npos);
        CHECK(what.find(fmt::format("= {} bytes, the buffer holds {}", buffer - lost_bytes,
                                    buffer)) != std::string::npos);
    }
    Seam::move_band(moved.core(), -by);
    checked.check_invariants();
}

} // namespace

TEST_CASE("byte conservation: a pair's account term by term, and a band off its anchor fails it",
          "[byte-conservation]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (index_t ps : {index_t(1), index_t(16)}) {
            INFO(to_string(mode) << ", page size " << ps);
            // Sizes that leave alignment at both ends: the sink (a 48-byte
            // entry's page) rounds up to two of the up side's 32-byte entries'
            // pages, and the top 40 bytes are short of a down side's page.
            const index_t bytes = 1000 * 48 * ps + 40;
            Pool pool(PoolLayout(bytes, {spec("full", 32, ps, GrowDirection::up),
                                         spec("swa", 48, ps, GrowDirection::down)}));
            Allocator up(pool, "full", options(mode)), down(pool, "swa", options(mode));
            up.bind_peer(down);
            const auto ids = down.alloc(Space(), 40 * ps);
            REQUIRE(ids.has_value());
            const std::vector<index_t> tokens = to_host(*ids);
            down.free(Space(), std::vector<index_t>(tokens.begin(), tokens.begin() + 3 * ps));
            const detail::BufferBytes b = up.core().buffer_bytes();
            CHECK(b.buffer == bytes);
            CHECK(b.live == down.core().live_pages() * 48 * ps);
            CHECK(b.live == 37 * 48 * ps);
            CHECK(b.holes + b.pending == (mode == CompactionMode::lazy ? 3 * 48 * ps : 0));
            CHECK(b.gaps == up.occupancy().gap_bytes);
            CHECK(b.gaps == down.occupancy().gap_bytes);
            CHECK(b.sink == pool.layout().sink_bytes());
            CHECK(b.sink == 48 * ps);
            CHECK(b.alignment == 16 * ps + 40);
            CHECK(b.overlap == 0);
            CHECK(b.accounted() == bytes);
            up.check_invariants();
            down.check_invariants();
            // The empty up band one page above its first page: those bytes are
            // neither the sink's nor a gap (an up band's gap lies above it).
            expect_account_broken(up, 1, 32 * ps, down);
        }
}

TEST_CASE("byte conservation: an empty down band off its anchor fails the account",
          "[byte-conservation]") {
    Pool pool(PoolLayout(64 * 1024, {spec("full", 32, 1, GrowDirection::up),
                                     spec("swa", 16, 1, GrowDirection::down)}));
    Allocator up(pool, "full", options(CompactionMode::lazy));
    Allocator down(pool, "swa", options(CompactionMode::lazy));
    up.bind_peer(down);
    const auto ids = up.alloc(Space(), 100);
    REQUIRE(ids.has_value());
    up.free(Space(), {to_host(*ids)[7]});
    CHECK(band_bytes(up) == 100 * 32);
    CHECK(up.core().buffer_bytes().accounted() == 64 * 1024);
    expect_account_broken(down, -2, 2 * 16, up);
}

TEST_CASE("byte conservation: the tri-pool's account, and its state band off its anchor",
          "[byte-conservation][tri-pool]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        INFO(to_string(mode));
        Pool pool(PoolLayout(1 << 20, {spec("mamba", 1024, 1, GrowDirection::up),
                                       floating_spec("swa", 16, 16, 0.5),
                                       spec("full", 32, 16, GrowDirection::down)}));
        TriPool tri(pool, mode);
        const auto ids = tri.alloc(Space(), 64);
        REQUIRE(ids.has_value());
        const detail::BufferBytes b = tri.state().core().buffer_bytes();
        CHECK(b.live == band_bytes(tri.full()) + band_bytes(tri.swa()));
        CHECK(b.live == 4 * 32 * 16 + 4 * 16 * 16);
        // The floating band's gaps on both sides are the state's and the full side's.
        CHECK(b.gaps == tri.swa().occupancy().gap_bytes);
        CHECK(b.gaps == tri.state().occupancy().gap_bytes + tri.full().occupancy().gap_bytes);
        CHECK(b.accounted() == 1 << 20);
        tri.check_invariants();
        expect_account_broken(tri.state(), 3, 3 * 1024, tri.state());
        // Every band checks the whole chain, the far end's too.
        expect_account_broken(tri.state(), 1, 1024, tri.full());
    }
}
