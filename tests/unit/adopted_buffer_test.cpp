// What the C API and the Python package rely on: a pool over caller-owned bytes
// (an engine's tensor) and device tables whose trailing row stays unbound (an
// engine indexes them with -1 padding ids).
#include <kvpool/swa_pair.hpp>

#include "test_config.hpp"
#include "test_random.hpp"
#include "test_support.hpp"

#include <algorithm>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using SwaPair = UnifiedSWAAllocator<Space>;
using Bytes = Kokkos::View<std::uint8_t*, Space::memory_space>;

constexpr int full_tag = 0;
constexpr int swa_tag = 1;
constexpr index_t buffer_bytes = 48 * 1024;

PoolLayout swa_layout(index_t page_size) {
    return PoolLayout(buffer_bytes, {spec("full", 24, page_size, GrowDirection::up),
                                     spec("swa", 40, page_size, GrowDirection::down)});
}

// The last row of both tables is unbound; the rows before it are the side's pages.
void check_sentinel_rows(const Allocator& side) {
    const auto v2p = to_host(side.virtual_to_physical());
    const auto p2v = to_host(side.physical_to_virtual());
    REQUIRE(static_cast<index_t>(v2p.size()) == side.core().virtual_table_pages() + 1);
    REQUIRE(static_cast<index_t>(p2v.size()) == side.geometry().num_physical_pages + 1);
    CHECK(v2p.back() == unbound);
    CHECK(p2v.back() == unbound);
}

} // namespace

TEST_CASE("a pool adopts caller bytes; a SWA pair with its own options per side compacts in them",
          "[adopt][pair][swa]") {
    for (const std::uint64_t seed : randomised_config().seed_list()) {
        INFO("seed " << seed << " (rerun alone with --kvpool-seed " << seed << ")");
        Rng rng(seed);
        const index_t page_size = rng.chance(0.5) ? 1 : 4;
        Bytes caller("caller", static_cast<std::size_t>(buffer_bytes + 64));
        Kokkos::deep_copy(caller, std::uint8_t(0xab));
        Pool pool(swa_layout(page_size), Pool::bytes_view(caller.data(), caller.extent(0)));
        REQUIRE(pool.bytes().data() == caller.data());
        // Adopted bytes are used as they are: not zeroed.
        REQUIRE(to_host(Kokkos::subview(caller, std::make_pair(0, 8))) ==
                std::vector<index_t>(8, 0xab));

        AllocatorOptions full_options = options(CompactionMode::lazy);
        full_options.max_moves_per_flush = 1;
        SwaPair pair(pool, full_options, options(CompactionMode::eager));
        REQUIRE(pair.full().options().max_moves_per_flush == 1);
        REQUIRE(pair.swa().options().mode == CompactionMode::eager);
        REQUIRE_FALSE(pair.swa().options().is_id_owner);

        std::vector<std::vector<index_t>> requests;
        while (auto ids = pair.alloc(Space(), page_size * rng.uniform(1, 3))) {
            requests.push_back(to_host(*ids));
            stamp_tokens(pool, pair.full(), full_tag, requests.back());
            stamp_tokens(pool, pair.swa(), swa_tag, requests.back());
        }
        REQUIRE(requests.size() > 4);
        for (std::size_t i = requests.size() - 1; i > 0; --i)
            std::swap(requests[i], requests[static_cast<std::size_t>(rng.uniform(0, index_t(i)))]);
        const auto kept = requests.size() / 2;
        for (std::size_t r = kept; r < requests.size(); ++r)
            pair.free(Space(), requests[r]);
        requests.resize(kept);
        std::vector<index_t> live;
        for (const auto& r : requests)
            live.insert(live.end(), r.begin(), r.end());

        const auto check = [&] {
            check_all(pool, pair.full(), full_tag, live);
            check_all(pool, pair.swa(), swa_tag, live);
            check_sentinel_rows(pair.full());
            check_sentinel_rows(pair.swa());
        };
        check();
        REQUIRE(pair.full().core().hole_pages() > 1);
        // The full side's opportunistic flushes move one page each until no hole is left.
        for (int flush = 0; pair.full().core().hole_pages() > 0; ++flush) {
            REQUIRE(flush < 10000);
            const index_t moved_before = pair.full().counters().pages_moved;
            const index_t moved = pair.full().flush(Space(), false);
            REQUIRE(moved <= 1);
            REQUIRE(pair.full().counters().pages_moved - moved_before == moved);
            check();
            if (moved == 0)
                break;
        }
        CHECK(pair.full().core().hole_pages() == 0);
        check();
    }
}

TEST_CASE("an adopted buffer smaller than the layout is refused", "[adopt][bad-input]") {
    Bytes caller("caller", static_cast<std::size_t>(buffer_bytes - 1));
    Kokkos::deep_copy(caller, std::uint8_t(7));
    try {
        Pool pool(swa_layout(1), Pool::bytes_view(caller.data(), caller.extent(0)));
        FAIL("a short buffer was adopted");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::invalid_argument);
        CHECK(std::string(e.what()).find("adopted buffer") != std::string::npos);
    }
    const auto bytes = to_host(caller);
    CHECK(std::all_of(bytes.begin(), bytes.end(), [](index_t b) { return b == 7; }));
}

TEST_CASE("device tables keep their trailing row unbound through binding and compaction",
          "[tables]") {
    Pool pool(swa_layout(1));
    Allocator up(pool, "full", options(CompactionMode::eager));
    Allocator down(pool, "swa", options(CompactionMode::eager));
    check_sentinel_rows(up);
    up.bind_peer(down); // resizes the v2p tables to the id owner's space
    check_sentinel_rows(up);
    check_sentinel_rows(down);
    auto first = up.alloc(Space(), 6);
    auto second = up.alloc(Space(), 6);
    REQUIRE(first);
    REQUIRE(second);
    const auto kept = to_host(*second);
    stamp_tokens(pool, up, full_tag, kept);
    up.free(Space(), to_host(*first)); // eager: the second request's pages move down
    REQUIRE(up.counters().pages_moved > 0);
    check_sentinel_rows(up);
    check_all(pool, up, full_tag, kept);
    check_all(pool, down, swa_tag, {});
}
