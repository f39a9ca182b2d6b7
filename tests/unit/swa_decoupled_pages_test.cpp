// The SWA pair with a smaller page on the SWA side than on the full side
// (decoupled page sizes): each full page has ratio SWA pages, bound with it in
// one allocation, and free_swa releases the window's pages one SWA page at a
// time. Here: the refusals, the window's grain and the bytes it gives back,
// the joint size against what an allocation gets, and a failed allocation.
// The differential test ("[swa-differential]") runs decoupled configurations
// against the reference model as well.
#include <kvpool/swa_pair.hpp>

#include "test_support.hpp"

#include <algorithm>
#include <string>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using SwaPair = UnifiedSWAAllocator<Space>;

constexpr int full_tag = 0;
constexpr int swa_tag = 1;

// A full page of 256 tokens, SWA pages of swa_page tokens.
struct Decoupled {
    Pool pool;
    SwaPair pair;
    std::vector<index_t> full_live, swa_live;
    Decoupled(CompactionMode mode, index_t swa_page, index_t bytes = 1 << 20)
        : pool(PoolLayout(bytes, {spec("full", 16, 256, GrowDirection::up),
                                  spec("swa", 8, swa_page, GrowDirection::down)})),
          pair(pool, mode) {}

    std::vector<index_t> alloc(index_t n) {
        const auto ids = pair.alloc(Space(), n);
        REQUIRE(ids.has_value());
        const std::vector<index_t> host = to_host(*ids);
        stamp_tokens(pool, pair.full(), full_tag, host);
        stamp_tokens(pool, pair.swa(), swa_tag, host);
        full_live.insert(full_live.end(), host.begin(), host.end());
        swa_live.insert(swa_live.end(), host.begin(), host.end());
        return host;
    }
    void free_swa(const std::vector<index_t>& tokens) {
        pair.free_swa(Space(), tokens);
        for (index_t t : tokens)
            swa_live.erase(std::remove(swa_live.begin(), swa_live.end(), t), swa_live.end());
    }
    void check() {
        REQUIRE_NOTHROW(pair.check_invariants());
        CHECK(check_stamps(pool, pair.full(), full_tag, full_live) == 0);
        CHECK(check_stamps(pool, pair.swa(), swa_tag, swa_live) == 0);
    }
};

// Tokens [from, to) of a request.
std::vector<index_t> positions(const std::vector<index_t>& request, index_t from, index_t to) {
    return {request.begin() + from, request.begin() + to};
}

} // namespace

TEST_CASE("swa pair, decoupled pages: an SWA page that does not divide the full page is refused",
          "[pair][swa][decoupled]") {
    for (index_t swa_page : {index_t(6), index_t(512)}) {
        INFO("swa page " << swa_page);
        Pool pool(PoolLayout(1 << 20, {spec("full", 16, 256, GrowDirection::up),
                                       spec("swa", 8, swa_page, GrowDirection::down)}));
        try {
            SwaPair pair(pool, CompactionMode::lazy);
            FAIL("accepted");
        } catch (const Error& e) {
            INFO(e.what());
            CHECK(e.code() == ErrorCode::invalid_argument);
            CHECK(std::string(e.what()).find("SWA side's page size " + std::to_string(swa_page) +
                                             " does not divide the full side's 256") !=
                  std::string::npos);
        }
    }
}

TEST_CASE("swa pair, decoupled pages: a window of 128 keeps 192 tokens at SWA pages of 64, 256 "
          "at the full side's 256",
          "[pair][swa][decoupled]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (index_t swa_page : {index_t(64), index_t(256)}) {
            INFO(to_string(mode) << ", swa page " << swa_page);
            Decoupled d(mode, swa_page);
            const index_t ratio = 256 / swa_page;
            const std::vector<index_t> request = d.alloc(1024);
            CHECK(d.pair.full().core().live_pages() == 4);
            CHECK(d.pair.swa().core().live_pages() == 4 * ratio);
            // Decoding token 1000: the window (128 tokens) reaches back to 872;
            // the engine releases the SWA pages wholly before it.
            const index_t window_start = 1000 - 128;
            const index_t released = window_start / swa_page * swa_page;
            d.free_swa(positions(request, 0, released));
            const index_t kept_pages = 4 * ratio - released / swa_page;
            CHECK(d.pair.swa().core().live_pages() == kept_pages);
            CHECK(d.pair.swa().allocated_count() == kept_pages * swa_page);
            // SWA tokens held for the window [872, 1000] and the rest of the
            // request's last page: 3 pages of 64 (192), or 1 of 256.
            CHECK(kept_pages * swa_page == (swa_page == 64 ? 192 : 256));
            // Tombstoned tokens read the sink; the rest their own bytes.
            for (index_t p : to_host(
                     d.pair.swa().translate(Space(), to_device(positions(request, 0, released)))))
                CHECK(p == 0);
            d.check();
            // The full free releases both sides, the SWA pages released before skipped.
            d.pair.free(Space(), request);
            d.full_live.clear();
            d.swa_live.clear();
            CHECK(d.pair.full().allocated_count() == 0);
            CHECK(d.pair.swa().allocated_count() == 0);
            d.check();
        }
}

TEST_CASE("swa pair, decoupled pages: the joint size is exactly what an allocation gets, holes "
          "of both sides included",
          "[pair][swa][decoupled]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        INFO(to_string(mode));
        Decoupled d(mode, 64, 96 * 4096 + 1000);
        const std::vector<index_t> a = d.alloc(20 * 256);
        const std::vector<index_t> b = d.alloc(20 * 256);
        // The SWA side loses 30 of a's SWA pages (7.5 full pages' worth), both
        // sides b's pages 5 to 9.
        d.free_swa(positions(a, 0, 30 * 64));
        const std::vector<index_t> both = positions(b, 5 * 256, 10 * 256);
        d.pair.free(Space(), both);
        for (index_t t : both) {
            d.full_live.erase(std::remove(d.full_live.begin(), d.full_live.end(), t),
                              d.full_live.end());
            d.swa_live.erase(std::remove(d.swa_live.begin(), d.swa_live.end(), t),
                             d.swa_live.end());
        }
        if (mode == CompactionMode::lazy) {
            CHECK(d.pair.full().core().hole_pages() == 5);
            CHECK(d.pair.swa().core().hole_pages() == 30 + 20);
        }
        d.check();
        const index_t available = d.pair.available_size();
        REQUIRE(available > 0);
        CHECK(available % 256 == 0);
        // One page more fails and changes nothing (eager: no flush to make).
        const std::string before =
            d.pair.full().state_string() + " | " + d.pair.swa().state_string();
        if (mode == CompactionMode::eager) {
            CHECK_FALSE(d.pair.alloc(Space(), available + 256).has_value());
            CHECK(d.pair.full().state_string() + " | " + d.pair.swa().state_string() == before);
        }
        d.alloc(available);
        CHECK(d.pair.available_size() == 0);
        d.check();
    }
}
