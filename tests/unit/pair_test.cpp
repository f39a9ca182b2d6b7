// The SWA pair and the Mamba pair: both sides of one buffer kept consistent.
#include <kvpool/mamba_pair.hpp>
#include <kvpool/swa_pair.hpp>

#include "test_config.hpp"
#include "test_support.hpp"

#include <random>
#include <set>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using SwaPair = UnifiedSWAAllocator<Space>;
using MambaPair = UnifiedMambaAllocator<Space>;
using Int32View = Kokkos::View<std::int32_t*, Space::memory_space>;

constexpr int full_tag = 0;
constexpr int swa_tag = 1;

struct SwaFixture {
    Pool pool;
    SwaPair pair;
    std::vector<index_t> live;      // live on both sides
    std::vector<index_t> full_only; // tombstoned on the SWA side
    SwaFixture(CompactionMode mode, index_t page_size, index_t bytes = 48 * 1024)
        : pool(PoolLayout(bytes, {spec("full", 24, page_size, GrowDirection::up),
                                  spec("swa", 40, page_size, GrowDirection::down)})),
          pair(pool, mode) {}

    std::optional<std::vector<index_t>> alloc(index_t n) {
        auto ids = pair.alloc(Space(), n);
        if (!ids)
            return std::nullopt;
        auto host = to_host(*ids);
        stamp_tokens(pool, pair.full(), full_tag, host);
        stamp_tokens(pool, pair.swa(), swa_tag, host);
        live.insert(live.end(), host.begin(), host.end());
        return host;
    }
    void check() {
        REQUIRE_NOTHROW(pair.check_invariants());
        std::vector<index_t> all_full = live;
        all_full.insert(all_full.end(), full_only.begin(), full_only.end());
        REQUIRE(check_stamps(pool, pair.full(), full_tag, all_full) == 0);
        REQUIRE(check_stamps(pool, pair.swa(), swa_tag, live) == 0);
        // Joint budget: both sides' bands plus the sink fit in the buffer.
        const auto& f = pair.full().core();
        const auto& s = pair.swa().core();
        REQUIRE(f.byte_high_frontier() <= s.byte_low_frontier());
        REQUIRE(f.band_pages() * f.geometry().page_bytes +
                    s.band_pages() * s.geometry().page_bytes + pool.layout().sink_bytes() <=
                pool.total_bytes());
    }
};

void remove(std::vector<index_t>& from, const std::vector<index_t>& gone) {
    const std::set<index_t> g(gone.begin(), gone.end());
    from.erase(std::remove_if(from.begin(), from.end(), [&](index_t t) { return g.count(t) != 0; }),
               from.end());
}

} // namespace

TEST_CASE("swa pair: one allocation binds the same virtual ids on both sides", "[pair][swa]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        SwaFixture f(mode, 1);
        auto ids = *f.alloc(30);
        const auto v2p_full = to_host(f.pair.full().virtual_to_physical());
        const auto v2p_swa = to_host(f.pair.swa().virtual_to_physical());
        for (index_t t : ids) {
            CHECK(v2p_full[t] > 0);
            CHECK(v2p_swa[t] > 0);
        }
        Int32View swa_physical("swa_physical", ids.size());
        f.pair.translate_swa(Space(), to_device(ids), swa_physical);
        auto host32 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), swa_physical);
        for (std::size_t i = 0; i < ids.size(); ++i)
            CHECK(host32(i) == v2p_swa[ids[i]]);
        f.check();
    }
}

TEST_CASE("swa pair: SWA tombstone, then the full free", "[pair][swa]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
        for (index_t ps : {index_t(1), index_t(4)}) {
            SwaFixture f(mode, ps);
            auto ids = *f.alloc(16 * ps);
            // The oldest 8 pages leave the window.
            std::vector<index_t> old(ids.begin(), ids.begin() + 8 * ps);
            f.pair.free_swa(Space(), old);
            remove(f.live, old);
            f.full_only = old;
            CHECK(f.pair.swa().allocated_count() == 8 * ps);
            CHECK(f.pair.full().allocated_count() == 16 * ps);
            auto swa_physical = to_host(f.pair.swa().translate(Space(), to_device(old)));
            for (index_t p : swa_physical)
                CHECK(p == 0); // tombstones read the sink
            f.check();
            // free_swa again is harmless; the full free releases the rest of both sides.
            f.pair.free_swa(Space(), old);
            f.pair.free(Space(), ids);
            f.live.clear();
            f.full_only.clear();
            CHECK(f.pair.full().allocated_count() == 0);
            CHECK(f.pair.swa().allocated_count() == 0);
            CHECK_THROWS_AS(f.pair.free_swa(Space(), {ids[0]}), Error);
            f.check();
        }
}

TEST_CASE("swa pair: a failed allocation leaves both sides as they were", "[pair][swa]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        SwaFixture f(mode, 4);
        f.alloc(64);
        const auto states = [&] {
            return f.pair.full().state_string() + f.pair.swa().state_string();
        };
        const std::string before = states();
        CHECK_FALSE(f.pair.alloc(Space(), f.pair.available_size() + 4).has_value());
        CHECK(states() == before);
        REQUIRE(f.alloc(f.pair.available_size()));
        // The first request (64 tokens, whole pages) needs a new page for token 65.
        const std::string full_pool = states();
        IndexView out("out", 1);
        CHECK_FALSE(f.pair.alloc_decode(Space(), {65}, to_device({f.live[63]}), out));
        CHECK(states() == full_pool);
        f.check();
    }
}

TEST_CASE("swa pair: lazy three-phase availability is exactly what an allocation gets",
          "[pair][swa][lazy]") {
    for (index_t ps : {index_t(1), index_t(4)}) {
        SwaFixture f(CompactionMode::lazy, ps);
        auto a = *f.alloc(40 * ps);
        auto b = *f.alloc(40 * ps);
        // Uneven holes: the SWA side loses 30 pages, the full side 10.
        std::vector<index_t> swa_gone(a.begin(), a.begin() + 20 * ps);
        f.pair.free_swa(Space(), swa_gone);
        remove(f.live, swa_gone);
        f.full_only = swa_gone;
        std::vector<index_t> both_gone(b.begin() + 10 * ps, b.begin() + 20 * ps);
        f.pair.free(Space(), both_gone);
        remove(f.live, both_gone);
        REQUIRE(f.pair.full().core().hole_pages() == 10);
        REQUIRE(f.pair.swa().core().hole_pages() == 30);
        const index_t available = f.pair.available_size();
        REQUIRE(available > 0);
        REQUIRE(f.alloc(available));
        CHECK(f.pair.available_size() == 0);
        f.check();
    }
}

TEST_CASE("swa pair: randomised churn keeps both sides consistent", "[pair][swa][randomised]") {
    for (std::uint64_t seed : randomised_config().seed_list())
        for (auto mode : {CompactionMode::eager, CompactionMode::lazy})
            for (index_t ps : {index_t(1), index_t(16)}) {
                UNSCOPED_INFO("seed " << seed << " mode " << to_string(mode) << " page " << ps
                                      << " (rerun: \"[pair]\" --kvpool-seed " << seed << ")");
                SwaFixture f(mode, ps, 96 * 1024);
                std::mt19937_64 rng(seed);
                std::vector<std::vector<index_t>> requests;
                const int ops = std::max(1, randomised_config().ops / 10);
                for (int step = 0; step < ops; ++step) {
                    const int op = static_cast<int>(rng() % 10);
                    if (op < 4) {
                        const index_t want = ps * static_cast<index_t>(1 + rng() % 6);
                        const index_t available = f.pair.available_size();
                        auto ids = f.alloc(want);
                        // Lazy mode may find more room by flushing; never less than promised.
                        REQUIRE((ids.has_value() || want > available));
                        if (ids)
                            requests.push_back(*ids);
                    } else if (op < 7 && !requests.empty()) {
                        const std::size_t r = rng() % requests.size();
                        f.pair.free(Space(), requests[r]);
                        remove(f.live, requests[r]);
                        remove(f.full_only, requests[r]);
                        requests.erase(requests.begin() + static_cast<std::ptrdiff_t>(r));
                    } else if (op < 9 && !requests.empty()) {
                        auto& r = requests[rng() % requests.size()];
                        std::vector<index_t> window_left(
                            r.begin(), r.begin() + static_cast<std::ptrdiff_t>(ps));
                        f.pair.free_swa(Space(), window_left);
                        remove(f.live, window_left);
                        for (index_t t : window_left)
                            if (std::find(f.full_only.begin(), f.full_only.end(), t) ==
                                f.full_only.end())
                                f.full_only.push_back(t);
                    } else {
                        f.pair.flush_opportunistic(Space());
                    }
                    REQUIRE_NOTHROW(f.pair.full().core().check_invariants());
                    REQUIRE_NOTHROW(f.pair.swa().core().check_invariants());
                    if (step % 25 == 0)
                        f.check();
                }
                f.check();
            }
}

namespace {

struct MambaFixture {
    Pool pool;
    MambaPair pair;
    MambaFixture(CompactionMode mode, index_t bytes, index_t state_bytes = 1000)
        : pool(PoolLayout(bytes, {spec("full", 16, 4, GrowDirection::up),
                                  spec("mamba", state_bytes, 1, GrowDirection::down)})),
          pair(pool, mode) {}
};

} // namespace

TEST_CASE("mamba pair: state slots and KV share the gap; a slot costs its bytes in KV tokens",
          "[pair][mamba]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        MambaFixture f(mode, 64 * 1024);
        CHECK(f.pair.state_slot_full_token_cost() == (1000 + 15) / 16);
        auto kv = to_host(*f.pair.alloc(Space(), 400));
        stamp_tokens(f.pool, f.pair.full(), full_tag, kv);
        const index_t before = f.pair.full().available_size();
        auto slots = to_host(*f.pair.alloc_state_slots(Space(), 3));
        stamp_tokens(f.pool, f.pair.state(), swa_tag, slots);
        // Three slots took at least 3 * 1000 bytes of gap from the full side.
        CHECK(before - f.pair.full().available_size() >= 3 * 1000 / 16 - 4);
        // Free the middle slot: the others keep their state.
        f.pair.free_state_slots(Space(), {slots[1]});
        f.pair.flush_opportunistic(Space());
        std::vector<index_t> kept{slots[0], slots[2]};
        f.pair.check_invariants();
        CHECK(check_stamps(f.pool, f.pair.state(), swa_tag, kept) == 0);
        CHECK(check_stamps(f.pool, f.pair.full(), full_tag, kv) == 0);
    }
}

TEST_CASE("mamba pair: a gap narrower than one state slot is reported, not corrupting",
          "[pair][mamba]") {
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        MambaFixture f(mode, 32 * 1024, 4096);
        auto slots = to_host(*f.pair.alloc_state_slots(Space(), 2));
        stamp_tokens(f.pool, f.pair.state(), swa_tag, slots);
        // Leave less than 4096 bytes of gap but room for KV tokens.
        const index_t kv_tokens = f.pair.full().available_size() - 4096 / 16 + 4;
        auto kv = to_host(*f.pair.alloc(Space(), kv_tokens / 4 * 4));
        stamp_tokens(f.pool, f.pair.full(), full_tag, kv);
        REQUIRE(f.pair.full().available_size() > 0);
        CHECK(f.pair.state_slots_available() == 0);
        CHECK(f.pair.state_slot_starved());
        const std::string before = f.pair.state().state_string();
        CHECK_FALSE(f.pair.alloc_state_slots(Space(), 1).has_value());
        CHECK(f.pair.state().state_string() == before);
        f.pair.check_invariants();
        CHECK(check_stamps(f.pool, f.pair.state(), swa_tag, slots) == 0);
        CHECK(check_stamps(f.pool, f.pair.full(), full_tag, kv) == 0);
    }
}
