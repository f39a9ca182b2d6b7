// The tri-pool with a smaller page on the sliding-window side than on the full
// side (decoupled page sizes, as in the SWA pair): each full page has ratio
// sliding-window pages, bound with it by alloc, alloc_extend and alloc_decode
// and freed with it by free; free_swa releases the window one sliding-window
// page at a time. Here: the refusal, the binding counts, the window's grain,
// free releasing every page, the joint size against what an allocation gets,
// and the data after compaction. The differential test ("[tri-differential]")
// runs decoupled configurations against the reference model as well.
#include <kvpool/error.hpp>
#include <kvpool/mamba_swa_allocator.hpp>

#include "test_support.hpp"

#include <algorithm>
#include <string>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using TriPool = UnifiedMambaSWAAllocator<Space>;

constexpr int full_tag = 0, swa_tag = 1, state_tag = 2;
constexpr index_t full_page = 64;

// State slots of 1 KiB, sliding-window pages of swa_page tokens (8 bytes
// each), full pages of 64 tokens (16 bytes each).
PoolLayout decoupled_layout(index_t swa_page, index_t bytes, double float_at) {
    return PoolLayout(bytes, {spec("mamba", 1024, 1, GrowDirection::up),
                              floating_spec("swa", 8, swa_page, float_at),
                              spec("full", 16, full_page, GrowDirection::down)});
}

// A tri-pool and what the engine holds: full tokens, tokens still in the
// window, state slots, every one stamped. Both KV sides hold whole pages of
// their own (the rest of a request's last full page included).
struct Tri {
    Pool pool;
    TriPool tri;
    std::vector<index_t> full_live, swa_live, slots;
    DataCheckScratch scratch;

    Tri(CompactionMode mode, index_t swa_page, index_t bytes, double float_at = 0.4)
        : pool(decoupled_layout(swa_page, bytes, float_at)), tri(pool, mode) {}

    index_t ratio() const { return tri.page_size() / tri.swa().page_size(); }
    index_t full_pages() const { return tri.full().core().live_pages(); }
    index_t swa_pages() const { return tri.swa().core().live_pages(); }

    void took(const std::vector<index_t>& ids) {
        stamp_tokens(pool, tri.full(), full_tag, ids, scratch);
        stamp_tokens(pool, tri.swa(), swa_tag, ids, scratch);
        full_live.insert(full_live.end(), ids.begin(), ids.end());
        swa_live.insert(swa_live.end(), ids.begin(), ids.end());
    }
    std::vector<index_t> alloc(index_t tokens) {
        const auto ids = tri.alloc(Space(), tokens);
        REQUIRE(ids.has_value());
        const std::vector<index_t> host = to_host(*ids);
        took(host);
        return host;
    }
    // Extends a request (empty: a new one) to seq tokens through alloc_extend.
    std::vector<index_t> extend(std::vector<index_t>& request, index_t seq) {
        const auto prefix = static_cast<index_t>(request.size());
        const index_t last = request.empty() ? unbound : request.back();
        auto out = kk::uninitialized<IndexView>("test::extend_out",
                                                static_cast<std::size_t>(seq - prefix));
        REQUIRE(tri.alloc_extend(Space(), {prefix}, {seq}, to_device({last}), out));
        const std::vector<index_t> fresh = to_host(out);
        took(fresh);
        request.insert(request.end(), fresh.begin(), fresh.end());
        return fresh;
    }
    // One token appended to each request through alloc_decode.
    void decode(std::vector<std::vector<index_t>*> batch) {
        std::vector<index_t> seq, last;
        for (const auto* r : batch) {
            seq.push_back(static_cast<index_t>(r->size()) + 1);
            last.push_back(r->back());
        }
        auto out = kk::uninitialized<IndexView>("test::decode_out", batch.size());
        REQUIRE(tri.alloc_decode(Space(), seq, to_device(last), out));
        const std::vector<index_t> fresh = to_host(out);
        took(fresh);
        for (std::size_t i = 0; i < batch.size(); ++i)
            batch[i]->push_back(fresh[i]);
    }
    void alloc_slots(index_t count) {
        const auto ids = tri.alloc_state_slots(Space(), count);
        REQUIRE(ids.has_value());
        const std::vector<index_t> fresh = to_host(*ids);
        stamp_tokens(pool, tri.state(), state_tag, fresh, scratch);
        slots.insert(slots.end(), fresh.begin(), fresh.end());
    }
    void free_swa(const std::vector<index_t>& tokens) {
        tri.free_swa(Space(), tokens);
        forget(swa_live, tokens);
    }
    void free(const std::vector<index_t>& tokens) {
        tri.free(Space(), tokens);
        forget(full_live, tokens);
        forget(swa_live, tokens);
    }
    static void forget(std::vector<index_t>& live, const std::vector<index_t>& tokens) {
        for (index_t t : tokens)
            live.erase(std::remove(live.begin(), live.end(), t), live.end());
    }

    // Invariants, every live token's bytes found through translate, and the
    // counts in whole pages.
    void check() {
        REQUIRE_NOTHROW(tri.check_invariants());
        REQUIRE(check_stamps(pool, tri.full(), full_tag, full_live, scratch) == 0);
        REQUIRE(check_stamps(pool, tri.swa(), swa_tag, swa_live, scratch) == 0);
        REQUIRE(check_stamps(pool, tri.state(), state_tag, slots, scratch) == 0);
        CHECK(tri.full().allocated_count() == full_pages() * tri.page_size());
        CHECK(tri.swa().allocated_count() == swa_pages() * tri.swa().page_size());
        CHECK(tri.state().allocated_count() == static_cast<index_t>(slots.size()));
    }
};

std::vector<index_t> positions(const std::vector<index_t>& request, index_t from, index_t to) {
    return {request.begin() + from, request.begin() + to};
}

} // namespace

TEST_CASE("tri-pool, decoupled pages: a sliding-window page that does not divide the full page "
          "is refused, the buffer untouched",
          "[tri-pool][decoupled][bad-input]") {
    for (const index_t swa_page : {index_t(6), index_t(128)}) {
        CAPTURE(swa_page);
        Pool pool(decoupled_layout(swa_page, 1 << 18, 0.4));
        Kokkos::deep_copy(pool.bytes(), std::uint8_t(0x5a));
        try {
            TriPool tri(pool, CompactionMode::lazy);
            FAIL("accepted");
        } catch (const Error& e) {
            INFO(e.what());
            CHECK(e.code() == ErrorCode::invalid_argument);
            CHECK(std::string(e.what()).find(
                      "tri-pool: the SWA side's page size " + std::to_string(swa_page) +
                      " does not divide the full side's 64") != std::string::npos);
        }
        const auto bytes = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), pool.bytes());
        CHECK(std::count(bytes.data(), bytes.data() + bytes.extent(0), std::uint8_t(0x5a)) ==
              static_cast<std::ptrdiff_t>(bytes.extent(0)));
    }
}

TEST_CASE("tri-pool, decoupled pages: every allocation binds ratio sliding-window pages per full "
          "page, free_swa releases one of them at a time, free all of them",
          "[tri-pool][decoupled]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (const index_t swa_page : {index_t(16), index_t(64)}) {
            CAPTURE(to_string(mode), swa_page);
            Tri t(mode, swa_page, 1 << 18);
            const index_t r = t.ratio();
            t.alloc_slots(3);
            std::vector<index_t> a = t.alloc(4 * full_page);
            CHECK(t.full_pages() == 4);
            CHECK(t.swa_pages() == 4 * r);
            // alloc_extend: 100 tokens on 2 full pages; then to 129 tokens, a third.
            std::vector<index_t> b;
            t.extend(b, 100);
            CHECK(t.full_pages() == 6);
            CHECK(t.swa_pages() == 6 * r);
            t.extend(b, 129);
            CHECK(t.full_pages() == 7);
            CHECK(t.swa_pages() == 7 * r);
            // alloc_decode: b's token 129 shares its page; a's token 256 starts one.
            t.decode({&a, &b});
            CHECK(t.full_pages() == 8);
            CHECK(t.swa_pages() == 8 * r);
            t.check();

            // The window leaves a's first sliding-window page, then two more;
            // naming the first again skips it.
            const index_t swa_before = t.tri.swa().allocated_count();
            t.free_swa(positions(a, 0, swa_page));
            CHECK(t.swa_pages() == 8 * r - 1);
            CHECK(t.tri.swa().allocated_count() == swa_before - swa_page);
            CHECK(t.full_pages() == 8);
            t.free_swa(positions(a, 0, 3 * swa_page));
            CHECK(t.swa_pages() == 8 * r - 3);
            for (index_t p :
                 to_host(t.tri.swa().translate(Space(), to_device(positions(a, 0, 3 * swa_page)))))
                CHECK(p == 0);
            t.check();

            // free(b): its 3 full pages and all 3 * r sliding-window pages, the
            // tail never written (tokens 130 to 191) included.
            t.free(b);
            CHECK(t.full_pages() == 5);
            CHECK(t.swa_pages() == 5 * r - 3);
            t.check();
            // free(a): the pages free_swa released are skipped.
            t.free(a);
            CHECK(t.full_pages() == 0);
            CHECK(t.swa_pages() == 0);
            CHECK(t.tri.full().allocated_count() == 0);
            CHECK(t.tri.swa().allocated_count() == 0);
            t.check();
        }
}

TEST_CASE("tri-pool, decoupled pages: compaction keeps every page's bytes where translate finds "
          "them",
          "[tri-pool][decoupled]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        CAPTURE(to_string(mode));
        Tri t(mode, 16, 1 << 18);
        std::vector<std::vector<index_t>> requests;
        for (index_t i = 0; i < 6; ++i) {
            t.alloc_slots(1);
            requests.push_back(t.alloc((i % 3 + 1) * full_page));
        }
        // Holes on both KV sides below live pages, and the window's pages
        // released in the middle of the band.
        t.free(requests[0]);
        t.free(requests[2]);
        t.free_swa(positions(requests[3], 0, 32));
        t.free_swa(positions(requests[5], 0, 16));
        if (mode == CompactionMode::lazy) {
            CHECK(t.tri.full().core().hole_pages() > 0);
            CHECK(t.tri.swa().core().hole_pages() > 0);
            // Urgent flushes, as an allocation short of room makes them.
            CHECK(t.tri.full().flush(Space(), true) + t.tri.swa().flush(Space(), true) > 0);
            CHECK(t.tri.full().core().hole_pages() == 0);
            CHECK(t.tri.swa().core().hole_pages() == 0);
        }
        CHECK(t.tri.full().counters().pages_moved + t.tri.swa().counters().pages_moved > 0);
        t.check();
    }
}

TEST_CASE("tri-pool, decoupled pages: available_size() is what an allocation gets; a page more "
          "needs an eviction",
          "[tri-pool][decoupled]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        CAPTURE(to_string(mode));
        // The band starts low: the state slots' growth shifts it.
        Tri t(mode, 16, 200 * 1024 + 700, 0.1);
        std::vector<std::vector<index_t>> requests;
        for (index_t i = 0; i < 8; ++i)
            requests.push_back(t.alloc(3 * full_page));
        t.alloc_slots(t.tri.state_slots_available() - 2);
        CHECK(t.tri.swa().counters().shifts > 0);
        // Holes (lazy) on both KV sides, more on the sliding-window side.
        t.free(requests[1]);
        t.free(requests[4]);
        t.free_swa(positions(requests[6], 0, 80));
        if (mode == CompactionMode::lazy)
            CHECK(t.tri.swa().core().hole_pages() > t.ratio() * t.tri.full().core().hole_pages());
        t.check();

        // The view's promise is kept exactly: what is left (gaps and holes)
        // holds less than a full page with its sliding-window pages and the
        // bound's slack (a sliding-window page at each edge of the band).
        const index_t available = t.tri.available_size();
        REQUIRE(available > 0);
        REQUIRE(available % full_page == 0);
        requests.push_back(t.alloc(available));
        CHECK(t.tri.available_size() == 0);
        const auto& full = t.tri.full().core();
        const auto& swa = t.tri.swa().core();
        const index_t full_page_bytes = full.geometry().page_bytes;
        const index_t swa_page_bytes = swa.geometry().page_bytes;
        const index_t page_cost = full_page_bytes + t.ratio() * swa_page_bytes;
        const index_t left = swa.gap_above_bytes() + swa.gap_below_bytes() +
                             full.hole_pages() * full_page_bytes +
                             swa.hole_pages() * swa_page_bytes;
        CHECK(left < page_cost + 2 * swa_page_bytes);
        t.check();

        // This buffer leaves less than a page's cost: one page more is had
        // only through the callback, which evicts one request.
        REQUIRE(left < page_cost);
        index_t evictions = 0;
        t.tri.set_eviction_callback([&](const EvictionShortfall&) -> std::size_t {
            if (evictions++ > 0)
                return 0;
            t.free(requests.front());
            requests.erase(requests.begin());
            return 1;
        });
        t.alloc(full_page);
        CHECK(evictions == 1);
        t.check();
    }
}
