// The composites' eviction callback (kvpool/eviction.hpp).
//
// Randomised: two engines over the same layout run the same requests
// (admissions with their state slots, decodes, window slides, finishes into a
// prefix cache or straight to free, cache hits, flushes); one evicts through
// the composite's callback, the other by its own loop (try, evict the least
// recently used cached request, try again). They must agree after every step:
// each allocation's outcome and ids, the evictions it took, every side's
// state; the callback's shortfall is checked against the composite each time
// it is called. Both end in check_invariants() and the data check over every
// live token and slot. SWA pair, Mamba pair and tri-pool; eager and lazy;
// page sizes 1 and 4.
//
// Then the rules one at a time: a callback with nothing to free leaves the
// failed allocation as without one; eviction stops at the first try that
// succeeds; a callback may free another side than the short one; allocating
// or installing a callback from inside it, a callback that claims bytes it
// did not free, and one that throws are errors that change nothing more.
//
// Reproduce one seed: kvpool_tests_<backend> "[eviction]" --kvpool-seed N
#include "eviction_engine.hpp"
#include "test_config.hpp"

#include <fmt/format.h>

#include <stdexcept>

using namespace kvpool;
using namespace kvpool::test;
using namespace kvpool::test::eviction;

namespace {

template <Kind K> void run_pair(std::uint64_t seed, index_t ps, CompactionMode mode, int ops) {
    Rng rng(seed ^ (static_cast<std::uint64_t>(K) << 40) ^ static_cast<std::uint64_t>(ps));
    const index_t total = 24 * ps * rng.uniform(60, 120) + rng.uniform(0, 500);
    Engine<K> a(ps, total, mode, true), b(ps, total, mode, false);
    const std::string where =
        fmt::format("{} seed={} page_size={} mode={} total_bytes={}", name_of(K), seed, ps,
                    mode == CompactionMode::lazy ? "lazy" : "eager", total);
    INFO(where);
    const auto agree = [&](int step, const std::string& op) {
        INFO("step " << step << ": " << op);
        REQUIRE(a.callback_errors().empty());
        REQUIRE(a.evictions() == b.evictions());
        REQUIRE(a.cache().size() == b.cache().size());
        REQUIRE(a.running().size() == b.running().size());
        REQUIRE(a.state() == b.state());
    };
    int evicting_allocs = 0;
    for (int step = 0; step < ops; ++step) {
        const index_t u = rng.uniform(0, 99);
        std::string op;
        if (u < 30 || a.running().empty()) {
            const index_t tokens =
                rng.chance(0.8) ? rng.uniform(1, 6 * ps) : rng.uniform(1, 30 * ps);
            op = fmt::format("admit {} tokens", tokens);
            const int before = a.evictions();
            const bool ok_a = a.admit(tokens), ok_b = b.admit(tokens);
            INFO(op);
            REQUIRE(ok_a == ok_b);
            if (ok_a) {
                REQUIRE(a.running().back().tokens == b.running().back().tokens);
                REQUIRE(a.running().back().slot == b.running().back().slot);
            } else {
                REQUIRE(a.cache().empty()); // a failure comes only once nothing is cached
            }
            evicting_allocs += a.evictions() > before ? 1 : 0;
        } else if (u < 60) {
            const auto i = static_cast<std::size_t>(
                rng.uniform(0, static_cast<index_t>(a.running().size()) - 1));
            op = fmt::format("decode request {}", i);
            const bool ok_a = a.decode(i), ok_b = b.decode(i);
            INFO(op);
            REQUIRE(ok_a == ok_b);
            if (ok_a)
                REQUIRE(a.running()[i].tokens.back() == b.running()[i].tokens.back());
            else
                REQUIRE(a.cache().empty());
        } else if (u < 70 && Engine<K>::has_window) {
            const auto i = static_cast<std::size_t>(
                rng.uniform(0, static_cast<index_t>(a.running().size()) - 1));
            op = fmt::format("slide the window of request {}", i);
            a.slide_window(i);
            b.slide_window(i);
        } else if (u < 88) {
            const auto i = static_cast<std::size_t>(
                rng.uniform(0, static_cast<index_t>(a.running().size()) - 1));
            const bool cache_it = rng.chance(0.8);
            op = fmt::format("finish request {}{}", i, cache_it ? " into the cache" : "");
            a.finish(i, cache_it);
            b.finish(i, cache_it);
        } else if (u < 95 && !a.cache().empty()) {
            const auto i = static_cast<std::size_t>(
                rng.uniform(0, static_cast<index_t>(a.cache().size()) - 1));
            op = fmt::format("reuse cached request {}", i);
            a.reuse(i);
            b.reuse(i);
        } else {
            op = "flush";
            a.flush();
            b.flush();
        }
        agree(step, op);
        if (step % 200 == 199) {
            REQUIRE(a.check() == 0);
            REQUIRE(b.check() == 0);
        }
    }
    REQUIRE(a.check() == 0);
    REQUIRE(b.check() == 0);
    // The run must have exercised the callback.
    REQUIRE(evicting_allocs > 0);
    REQUIRE(a.callback_calls() >= a.evictions());
}

// The code of the kvpool::Error f throws.
template <class F> std::optional<ErrorCode> code_of(const F& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.code();
    }
    return std::nullopt;
}

template <Kind K> void run_all(std::uint64_t seed, int ops) {
    for (const index_t ps : {index_t(1), index_t(4)})
        for (const CompactionMode mode : {CompactionMode::eager, CompactionMode::lazy})
            run_pair<K>(seed, ps, mode, ops);
}

} // namespace

TEST_CASE("eviction: the callback matches the engine's own evict-and-retry loop",
          "[eviction][randomised]") {
    const auto& config = randomised_config();
    const int ops = config.ops;
    for (const std::uint64_t seed : config.seed_list()) {
        UNSCOPED_INFO("eviction seed " << seed);
        run_all<Kind::swa>(seed, ops);
        run_all<Kind::mamba>(seed, ops);
        run_all<Kind::tri>(seed, ops);
    }
}

namespace {} // namespace

TEST_CASE("eviction: stops at the first try that succeeds", "[eviction]") {
    // Cached requests of 4 pages fill the buffer; a request of 8 pages needs
    // one or two of them, whatever the gap left over holds.
    auto e = std::make_unique<Engine<Kind::swa>>(4, 24 * 4 * 64, CompactionMode::eager, true);
    const index_t per = 16;
    while (e->admit(per)) {
    }
    while (!e->running().empty())
        e->finish(0, true);
    const int calls = e->callback_calls(); // the last admission's, with nothing cached
    const std::size_t cached = e->cache().size();
    REQUIRE(cached >= 3);
    const index_t need = 2 * per;
    const index_t before = e->composite().available_size();
    REQUIRE(before < need);
    REQUIRE(e->admit(need));
    const int expected = before + per >= need ? 1 : 2;
    CHECK(e->evictions() == expected);
    CHECK(e->callback_calls() - calls == expected);
    CHECK(e->cache().size() == cached - static_cast<std::size_t>(expected));
    CHECK(e->callback_errors().empty());
    CHECK(e->check() == 0);
}

TEST_CASE("eviction: a callback with nothing to free leaves the allocation failed and the pool "
          "unchanged",
          "[eviction]") {
    Pool pool(layout_of(Kind::tri, 4, 24 * 4 * 40));
    UnifiedMambaSWAAllocator<Space> tri(pool, CompactionMode::lazy);
    int calls = 0;
    tri.set_eviction_callback([&](const EvictionShortfall&) -> std::size_t {
        ++calls;
        return 0;
    });
    REQUIRE(tri.has_eviction_callback());
    REQUIRE(tri.alloc(Space(), 16).has_value());
    const std::string before =
        tri.full().state_string() + tri.swa().state_string() + tri.state().state_string();
    CHECK_FALSE(tri.alloc(Space(), 4 * 400).has_value());
    CHECK(calls == 1);
    CHECK(tri.full().state_string() + tri.swa().state_string() + tri.state().state_string() ==
          before);
    tri.set_eviction_callback(nullptr);
    CHECK_FALSE(tri.has_eviction_callback());
    CHECK_FALSE(tri.alloc(Space(), 4 * 400).has_value());
    CHECK(calls == 1);
    tri.check_invariants(Space());
}

TEST_CASE("eviction: the callback may free the other side than the short one", "[eviction]") {
    // Mamba pair: state slots short; the callback frees full KV only, whose
    // bytes the state side then takes.
    Pool pool(layout_of(Kind::mamba, 4, 24 * 4 * 20));
    UnifiedMambaAllocator<Space> pair(pool, CompactionMode::eager);
    std::vector<std::vector<index_t>> kv;
    while (auto ids = pair.alloc(Space(), 4))
        kv.push_back(to_host(*ids));
    REQUIRE_FALSE(pair.alloc_state_slots(Space(), 1).has_value());
    // Eager: each freed full page widens the gap by its bytes.
    const index_t slot_bytes = pair.state().geometry().page_bytes;
    const index_t page_bytes = pair.full().geometry().page_bytes;
    const index_t gap = pair.full().occupancy().gap_bytes;
    REQUIRE(gap < slot_bytes);
    const auto frees_needed =
        static_cast<std::size_t>((slot_bytes - gap + page_bytes - 1) / page_bytes);
    std::vector<EvictionShortfall> seen;
    pair.set_eviction_callback([&](const EvictionShortfall& s) -> std::size_t {
        seen.push_back(s);
        if (kv.empty())
            return 0;
        pair.free(Space(), {kv.back().front()});
        kv.pop_back();
        return 24 * 4;
    });
    const auto slot = pair.alloc_state_slots(Space(), 1);
    REQUIRE(slot.has_value());
    REQUIRE_FALSE(seen.empty());
    CHECK(seen.front().side == "mamba");
    CHECK(seen.front().requested_pages == 1);
    CHECK(seen.front().pages == 1);
    CHECK(seen.front().bytes == static_cast<std::size_t>(pair.state().geometry().page_bytes));
    CHECK(seen.size() == frees_needed);
    pair.check_invariants(Space());
    std::vector<index_t> live;
    for (const auto& ids : kv)
        live.insert(live.end(), ids.begin(), ids.end());
    CHECK(pair.full().allocated_count() == static_cast<index_t>(live.size()));
}

TEST_CASE("eviction: misuse from inside the callback is an error that changes nothing more",
          "[eviction]") {
    Pool pool(layout_of(Kind::swa, 2, 24 * 2 * 40));
    UnifiedSWAAllocator<Space> pair(pool, CompactionMode::eager);
    std::vector<std::vector<index_t>> held;
    while (auto ids = pair.alloc(Space(), 2))
        held.push_back(to_host(*ids));
    const auto state = [&] { return pair.full().state_string() + pair.swa().state_string(); };
    const std::string before = state();

    SECTION("allocating") {
        pair.set_eviction_callback([&](const EvictionShortfall&) -> std::size_t {
            (void)pair.alloc(Space(), 2);
            return 1;
        });
        REQUIRE(code_of([&] { (void)pair.alloc(Space(), 2); }) == ErrorCode::invalid_state);
    }
    SECTION("installing a callback") {
        pair.set_eviction_callback([&](const EvictionShortfall&) -> std::size_t {
            pair.set_eviction_callback(nullptr);
            return 1;
        });
        REQUIRE(code_of([&] { (void)pair.alloc(Space(), 2); }) == ErrorCode::invalid_state);
        CHECK(pair.has_eviction_callback());
    }
    SECTION("claiming bytes it did not free") {
        pair.set_eviction_callback([&](const EvictionShortfall&) -> std::size_t { return 64; });
        REQUIRE(code_of([&] { (void)pair.alloc(Space(), 2); }) == ErrorCode::invalid_state);
    }
    SECTION("freeing inside a free group it leaves open") {
        pair.set_eviction_callback([&](const EvictionShortfall&) -> std::size_t {
            pair.free_group_begin();
            pair.free(Space(), {held.front().front()});
            return 64;
        });
        REQUIRE(code_of([&] { (void)pair.alloc(Space(), 2); }) == ErrorCode::invalid_state);
        pair.free_group_end(Space());
        held.erase(held.begin());
        CHECK(pair.alloc(Space(), 2).has_value());
        pair.check_invariants(Space());
        return;
    }
    SECTION("throwing") {
        pair.set_eviction_callback(
            [&](const EvictionShortfall&) -> std::size_t { throw std::runtime_error("engine"); });
        REQUIRE_THROWS_AS(pair.alloc(Space(), 2), std::runtime_error);
    }
    CHECK(state() == before);
    pair.set_eviction_callback(nullptr);
    pair.check_invariants(Space());
}
