// The prefix cache: against hand-worked expectations on a store that records
// what it is told to release, and in the scheduler on a tiny unified pool
// where every eviction can be worked out by hand.
#include "prefix_cache.hpp"
#include "scheduler.hpp"
#include "sim_test_support.hpp"
#include "workload.hpp"

#include <catch2/catch_get_random_seed.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <random>

using namespace kvpool;
using namespace kvpool::sim;
using namespace kvpool::sim::test;

namespace {

class RecordingStore final : public CacheStore {
public:
    void release_pages(const std::vector<index_t>& p) override {
        pages.insert(pages.end(), p.begin(), p.end());
    }
    void release_window_pages(const std::vector<index_t>& p) override {
        windows.insert(windows.end(), p.begin(), p.end());
    }
    void release_state_slot(index_t slot) override { states.push_back(slot); }

    std::vector<index_t> pages, windows, states;
};

// A request's KV of `pages` pages from `first` on (page size 2), none shared.
RequestKv own_kv(index_t first, index_t pages, index_t tokens) {
    RequestKv kv;
    for (index_t i = 0; i < pages; ++i)
        kv.pages.push_back(first + i);
    kv.tokens = tokens;
    return kv;
}

using Hashes = std::vector<std::uint64_t>;

} // namespace

TEST_CASE("prefix cache: a finished prompt's full blocks are shared", "[sim][prefix-cache]") {
    RecordingStore store;
    // Blocks of 4 tokens in pages of 2.
    PrefixCache cache({4, 2, 0, false}, store);
    CHECK(cache.match({1, 2, 3}, 100).hit_tokens == 0);

    // 13 prompt tokens: 3 full blocks cached (pages 10..15), the partial one and
    // the output (pages 16..17) released.
    const PrefixMatch none = cache.match({1, 2, 3, 4}, 12);
    cache.lock(none);
    const CacheInsertion kept = cache.insert({1, 2, 3, 4}, 13, none, own_kv(10, 8, 15));
    CHECK(kept.tokens_taken == 12);
    CHECK(kept.pages_to_release == std::vector<index_t>{16, 17});
    CHECK(cache.stats().blocks == 3);
    CHECK(store.pages.empty());

    const PrefixMatch two = cache.match({1, 2, 9}, 100);
    CHECK(two.hit_tokens == 8);
    CHECK(two.pages == std::vector<index_t>{10, 11, 12, 13});
    // A request prefills at least its last prompt token: 11 tokens allow two blocks.
    CHECK(cache.match({1, 2, 3}, 11).hit_tokens == 8);
    CHECK(cache.match({1, 2, 3}, 12).hit_tokens == 12);
    CHECK(cache.match({2, 3}, 100).hit_tokens == 0); // a prefix, not any run of blocks

    // A second request sharing blocks 1, 2 leaves block 5 after them; its copy
    // of nothing else is kept.
    cache.lock(two);
    RequestKv kv = own_kv(20, 4, 8);
    kv.pages = {10, 11, 12, 13, 20, 21, 22};
    kv.shared_pages = 4;
    kv.tokens = 13;
    const CacheInsertion second = cache.insert({1, 2, 5}, 12, two, kv);
    CHECK(second.tokens_taken == 4);
    CHECK(second.pages_to_release == std::vector<index_t>{22});
    CHECK(cache.stats().blocks == 4);
    CHECK(cache.match({1, 2, 5}, 100).pages == std::vector<index_t>{10, 11, 12, 13, 20, 21});
}

TEST_CASE("prefix cache: least recently used leaves go first; locked blocks stay",
          "[sim][prefix-cache]") {
    RecordingStore store;
    PrefixCache cache({4, 2, 0, false}, store);
    const auto insert = [&](const Hashes& blocks, index_t first_page) {
        const PrefixMatch m = cache.match(blocks, 100);
        cache.lock(m);
        RequestKv kv = own_kv(first_page, static_cast<index_t>(blocks.size()) * 2,
                              static_cast<index_t>(blocks.size()) * 4);
        kv.pages.insert(kv.pages.begin(), m.pages.begin(), m.pages.end());
        kv.pages.resize(blocks.size() * 2);
        kv.shared_pages = static_cast<index_t>(m.pages.size());
        cache.insert(blocks, static_cast<index_t>(blocks.size()) * 4, m, kv);
    };
    insert({1, 2}, 10); // blocks 1 (pages 10, 11) and 2 (12, 13)
    insert({5, 6}, 20); // blocks 5 (20, 21) and 6 (22, 23)
    insert({1, 3}, 30); // block 3 (30, 31) under block 1
    CHECK(cache.eviction_order() == Hashes{2, 6, 3});
    cache.match({5, 6}, 100); // uses 5 and 6 again
    CHECK(cache.eviction_order() == Hashes{2, 3, 6});

    const PrefixMatch locked = cache.match({1}, 100);
    cache.lock(locked);
    REQUIRE(cache.evict(EvictionKind::entry));
    CHECK(store.pages == std::vector<index_t>{12, 13});
    REQUIRE(cache.evict(EvictionKind::entry));
    CHECK(store.pages == std::vector<index_t>{12, 13, 30, 31});
    // Block 1 has no child left, but is locked: 6, then 5 (a leaf now) go.
    CHECK(cache.eviction_order() == Hashes{6});
    REQUIRE(cache.evict(EvictionKind::entry));
    REQUIRE(cache.evict(EvictionKind::entry));
    CHECK(store.pages == std::vector<index_t>{12, 13, 30, 31, 22, 23, 20, 21});
    CHECK_FALSE(cache.evict(EvictionKind::entry));
    cache.unlock(locked);
    CHECK(cache.eviction_order() == Hashes{1});
    cache.clear();
    CHECK(cache.stats().blocks == 0);
    CHECK(cache.stats().evicted_blocks == 5);
}

TEST_CASE("prefix cache: window copies only for the window before the cached end",
          "[sim][prefix-cache]") {
    RecordingStore store;
    // Blocks of 4 tokens, pages of 2, a window of 6 tokens.
    PrefixCache cache({4, 2, 6, false}, store);
    const PrefixMatch none = cache.match({1, 2, 3}, 100);
    cache.lock(none);
    // 12 prompt tokens (pages 0..5) and output to 14 tokens (page 6). Decode
    // released the window copies of pages 0..3 but the kept ones, [3, 6).
    RequestKv kv = own_kv(0, 7, 14);
    kv.window_released_pages = 4;
    kv.window_keep_begin = 3;
    kv.window_keep_end = 6;
    cache.insert({1, 2, 3}, 12, none, kv);
    // The window of 6 before token 12 starts at page 3: the cache releases the
    // window copies of pages 0..2 (those decode had not released already are
    // skipped by the pool) and keeps those of 3..5.
    CHECK(store.windows == std::vector<index_t>{0, 1, 2});
    CHECK(cache.match({1, 2, 3}, 100).hit_tokens == 12);
    // Ending after block 2, the window needs pages 1..3: released.
    CHECK(cache.match({1, 2, 7}, 100).hit_tokens == 0);
    // A fixed split's short window side takes the window copies, LRU.
    REQUIRE(cache.evict(EvictionKind::window));
    CHECK(cache.match({1, 2, 3}, 100).hit_tokens == 0);
    CHECK(cache.stats().blocks == 3); // the full-attention KV stays
}

TEST_CASE("prefix cache: a Mamba state per cached end", "[sim][prefix-cache]") {
    RecordingStore store;
    PrefixCache cache({4, 2, 0, true}, store);
    const PrefixMatch none = cache.match({1, 2}, 100);
    cache.lock(none);
    RequestKv kv = own_kv(0, 5, 9);
    kv.state_slot = 7;
    const CacheInsertion kept = cache.insert({1, 2}, 9, none, kv);
    CHECK(kept.took_state_slot);
    CHECK(cache.match({1, 2, 3}, 100).hit_tokens == 8);
    CHECK(cache.match({1, 5}, 100).hit_tokens == 0); // block 1 ends without a state
    REQUIRE(cache.evict(EvictionKind::state));
    CHECK(store.states == std::vector<index_t>{7});
    CHECK(cache.match({1, 2}, 100).hit_tokens == 0);
}

TEST_CASE("prefix cache in the scheduler: hits are not prefilled, eviction stops as soon as "
          "the allocation fits",
          "[sim][prefix-cache][scheduler]") {
    // 21 bytes, a 1-byte sink: 20 bytes, a token costs 1 on each side. Blocks
    // of 2 tokens, pages of 1, a window that never binds.
    auto pool = swa_pool(21, 1, 1, 1, CompactionMode::eager);
    std::vector<RequestSpec> requests{{0.0, 4, 1}, {10.0, 4, 1}, {20.0, 5, 1}, {30.0, 6, 2}};
    requests[0].prefix_blocks = {1, 2};
    requests[1].prefix_blocks = {3, 4};
    requests[2].prefix_blocks = {1, 2, 99};
    requests[3].prefix_blocks = {5, 6, 7};
    SchedulerConfig config = one_second_steps(1000, false);
    config.prefix_block_tokens = 2;
    config.evict_across_sides = true;
    Scheduler scheduler(*pool, requests, config);
    // Request 0 runs in [0, 2) and leaves blocks 1, 2 (4 tokens: 8 bytes);
    // request 1 in [10, 12) leaves 3, 4: 16 bytes cached, 4 free.
    while (scheduler.result().completed < 2)
        scheduler.step();
    CHECK(pool->stats().live_full_tokens == 8);
    // Request 2 shares blocks 1, 2 and prefills 1 token: no eviction.
    while (scheduler.running_count() == 0)
        scheduler.step();
    CHECK(pool->stats().live_full_tokens == 9);
    while (scheduler.result().completed < 3)
        scheduler.step();
    // Request 3 needs 6 tokens (12 bytes), 4 are free: blocks 4, then 3 (the
    // least recently used) go, and then it fits: blocks 1, 2 stay.
    while (scheduler.running_count() == 0)
        scheduler.step();
    CHECK(pool->stats().live_full_tokens == 4 + 6);
    // Decoding its token needs 2 bytes, none is free: block 2 goes (4 bytes), block 1 stays.
    scheduler.step();
    CHECK(pool->stats().live_full_tokens == 2 + 7);
    const RunResult r = run_all(scheduler);
    CHECK(r.completed == 4);
    CHECK(r.prefix_hit_tokens == 4);
    CHECK(r.admitted_tokens == 4 + 4 + 5 + 6);
    CHECK(r.prefill_tokens == 4 + 4 + 1 + 6);
    // Blocks 4, 3 and 2, then at the end 1 and the three request 3 left.
    CHECK(r.prefix_cache.evicted_blocks == 3 + 4);
    CHECK(r.tokens_allocated() == r.tokens_released());
    CHECK(pool->stats().live_full_tokens == 0);
    CHECK(pool->stats().live_second_entries == 0);
    CHECK(pool->stats().pages_allocated == pool->stats().pages_freed);
}

TEST_CASE("the multi-turn workload: each turn's blocks extend its session's, prefixes are shared",
          "[sim][prefix-cache][workload]") {
    const Workload w = multi_turn_workload({60, 4.0, 3});
    CHECK(w.block_tokens == 512);
    REQUIRE(w.requests.size() > 60);
    std::size_t extends_earlier = 0;
    std::size_t shares_first_block = 0;
    for (std::size_t i = 0; i < w.requests.size(); ++i) {
        const RequestSpec& r = w.requests[i];
        CHECK(r.prefix_blocks.size() ==
              static_cast<std::size_t>((r.prompt_tokens + 511) / 512)); // as Mooncake's
        if (i > 0)
            CHECK(w.requests[i - 1].arrival_s <= r.arrival_s);
        const std::size_t full = static_cast<std::size_t>(r.prompt_tokens / 512);
        for (std::size_t j = 0; j < i; ++j) {
            const RequestSpec& earlier = w.requests[j];
            const std::size_t earlier_full = static_cast<std::size_t>(earlier.prompt_tokens / 512);
            shares_first_block += r.prefix_blocks[0] == earlier.prefix_blocks[0] ? 1 : 0;
            // An earlier turn of the session: its full blocks start this prompt.
            if (earlier_full > 1 && earlier_full < full &&
                std::equal(earlier.prefix_blocks.begin(),
                           earlier.prefix_blocks.begin() +
                               static_cast<std::ptrdiff_t>(earlier_full),
                           r.prefix_blocks.begin()))
                ++extends_earlier;
        }
        // A partial last block has a hash no other request has.
        if (r.prompt_tokens % 512 != 0)
            for (std::size_t j = 0; j < w.requests.size(); ++j)
                if (j != i)
                    CHECK(std::find(w.requests[j].prefix_blocks.begin(),
                                    w.requests[j].prefix_blocks.end(),
                                    r.prefix_blocks.back()) == w.requests[j].prefix_blocks.end());
    }
    CHECK(extends_earlier > w.requests.size() / 2);
    CHECK(shares_first_block > w.requests.size());
}

namespace {

// The cache as a plain set of cached prefixes, each with when it was last
// used and how many running requests lock it.
struct ReferenceCache {
    std::map<Hashes, std::uint64_t> used;
    std::map<Hashes, int> locks;
    std::uint64_t clock = 0;

    static Hashes prefix(const Hashes& blocks, std::size_t n) {
        return {blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(n)};
    }
    std::size_t match(const Hashes& blocks) {
        std::size_t k = 0;
        while (k < blocks.size() && used.count(prefix(blocks, k + 1)))
            ++k;
        ++clock;
        for (std::size_t i = 1; i <= k; ++i)
            used[prefix(blocks, i)] = clock;
        return k;
    }
    void lock(const Hashes& blocks, std::size_t k, int by) {
        for (std::size_t i = 1; i <= k; ++i)
            locks[prefix(blocks, i)] += by;
    }
    bool is_leaf(const Hashes& p) const {
        const auto next = used.upper_bound(p);
        return next == used.end() || next->first.size() <= p.size() ||
               !std::equal(p.begin(), p.end(), next->first.begin());
    }
    std::optional<Hashes> lru_leaf() const {
        std::optional<Hashes> best;
        for (const auto& [p, t] : used) {
            const auto l = locks.find(p);
            if ((l == locks.end() || l->second == 0) && is_leaf(p) && (!best || t < used.at(*best)))
                best = p;
        }
        return best;
    }
};

} // namespace

TEST_CASE("prefix cache against a plain model: random requests and evictions",
          "[sim][prefix-cache]") {
    // Catch's seed, printed at the start of every run (--rng-seed repeats one).
    std::mt19937 random(Catch::getSeed());
    RecordingStore store;
    PrefixCache cache({4, 2, 0, false}, store);
    ReferenceCache reference;
    struct Request {
        Hashes blocks;
        PrefixMatch match;
        std::size_t matched;
    };
    std::vector<Request> running;
    std::map<index_t, Hashes> block_of_page; // the first page of each cached block
    index_t next_page = 0;
    for (int op = 0; op < 3000; ++op) {
        const unsigned kind = random() % 3;
        if (kind == 0 && running.size() < 3) {
            Hashes blocks(1 + random() % 4);
            for (auto& b : blocks)
                b = 1 + random() % 3;
            const PrefixMatch m = cache.match(blocks, 100);
            const std::size_t k = reference.match(blocks);
            REQUIRE(m.hit_tokens == static_cast<index_t>(k) * 4);
            cache.lock(m);
            reference.lock(blocks, k, 1);
            running.push_back({blocks, m, k});
        } else if (kind == 1 && !running.empty()) {
            const std::size_t i = random() % running.size();
            const Request r = running[i];
            running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
            RequestKv kv;
            kv.pages = r.match.pages;
            kv.shared_pages = static_cast<index_t>(kv.pages.size());
            for (std::size_t b = r.matched; b < r.blocks.size(); ++b) {
                const Hashes p = ReferenceCache::prefix(r.blocks, b + 1);
                if (!reference.used.count(p))
                    block_of_page[next_page] = p; // the cache takes this copy
                kv.pages.push_back(next_page++);
                kv.pages.push_back(next_page++);
            }
            kv.tokens = static_cast<index_t>(kv.pages.size()) * 2;
            cache.insert(r.blocks, static_cast<index_t>(r.blocks.size()) * 4 + 1, r.match, kv);
            reference.lock(r.blocks, r.matched, -1);
            ++reference.clock;
            for (std::size_t b = 1; b <= r.blocks.size(); ++b)
                reference.used[ReferenceCache::prefix(r.blocks, b)] = reference.clock;
        } else if (kind == 2) {
            const auto expected = reference.lru_leaf();
            const std::size_t released = store.pages.size();
            REQUIRE(cache.evict(EvictionKind::entry) == expected.has_value());
            if (expected) {
                REQUIRE(store.pages.size() == released + 2);
                CHECK(block_of_page.at(store.pages[released]) == *expected);
                reference.used.erase(*expected);
            }
        }
        REQUIRE(cache.stats().blocks == reference.used.size());
    }
}

TEST_CASE("prefix cache in the scheduler: a fixed split evicts only what its short side holds; "
          "the unified pool whole blocks",
          "[sim][prefix-cache][scheduler]") {
    // A token costs 1 byte on each side; blocks of 2 tokens, pages of 1, a
    // window that never binds (cached blocks keep their window copies).
    std::vector<RequestSpec> requests{{0.0, 8, 1}, {10.0, 8, 1}, {20.0, 6, 1}};
    requests[0].prefix_blocks = {1, 2, 3, 4};
    requests[1].prefix_blocks = {5, 6, 7, 8};
    requests[2].prefix_blocks = {9, 10, 11};
    const std::vector<SubPoolSpec> specs{{"full", 1, 1, GrowDirection::up, 0},
                                         {"swa", 1, 1, GrowDirection::down, 0}};
    for (const bool unified : {false, true}) {
        INFO((unified ? "unified" : "fixed split, 60% full"));
        const PoolLayout layout =
            unified ? PoolLayout(41, specs) : PoolLayout::fixed_split(41, specs, 0.6);
        SwaSimPool<HostSpace> pool(layout, unified ? CompactionMode::eager : CompactionMode::lazy,
                                   RealPageBytes{1.0, 1.0});
        SchedulerConfig config = one_second_steps(1000, false);
        config.prefix_block_tokens = 2;
        config.evict_across_sides = unified;
        Scheduler scheduler(pool, requests, config);
        while (scheduler.result().completed < 2)
            scheduler.step();
        // 16 tokens cached, with their window copies: 32 of 40 bytes.
        CHECK(pool.stats().live_full_tokens == 16);
        CHECK(pool.stats().live_second_entries == 16);
        while (scheduler.running_count() == 0)
            scheduler.step();
        if (unified) {
            // 6 tokens need 12 bytes, 8 are free: the least recently used block
            // goes whole (4 bytes), and then the request fits.
            CHECK(pool.stats().live_full_tokens == 14 + 6);
            CHECK(pool.stats().live_second_entries == 14 + 6);
        } else {
            // The window side is the short one: window copies go, LRU, and the
            // full-attention KV of every cached block stays.
            const index_t window_cap = layout.sub_pool("swa").page_capacity();
            REQUIRE(window_cap < 16 + 6);
            REQUIRE(layout.sub_pool("full").page_capacity() >= 16 + 6);
            CHECK(pool.stats().live_full_tokens == 16 + 6);
            CHECK(pool.stats().live_second_entries <= window_cap);
            CHECK(pool.stats().live_second_entries >= window_cap - 1);
        }
        const RunResult r = run_all(scheduler);
        CHECK(r.completed == 3);
        CHECK((r.prefix_cache.evicted_windows > 0) == !unified);
        CHECK(r.tokens_allocated() == r.tokens_released());
        CHECK(pool.stats().live_second_entries == 0);
    }
}
