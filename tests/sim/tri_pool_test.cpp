// The tri-pool in the simulator: its pool plan (layout order, a three-way
// fixed split's caps), the engine's two knobs and the sweep's 2-D grid, and
// the scheduler on tiny tri-pools whose steps can be worked out by hand.
#include "experiment.hpp"
#include "model_config.hpp"
#include "pool_plan.hpp"
#include "scheduler.hpp"
#include "sim_test_support.hpp"

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

using namespace kvpool;
using namespace kvpool::sim;
using namespace kvpool::sim::test;
using Catch::Approx;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr CompactionMode both_modes[] = {CompactionMode::eager, CompactionMode::lazy};

void check_conservation(const RunResult& r, const SimPool& pool) {
    CHECK(r.tokens_allocated() == r.tokens_released());
    const PoolStats s = pool.stats();
    CHECK(s.live_full_tokens == 0);
    CHECK(s.live_second_entries == 0);
    CHECK(s.live_third_entries == 0);
    CHECK(s.pages_allocated == s.pages_freed);
}

} // namespace

TEST_CASE("tri-pool plan: state slots, sliding window, full KV from the low end up",
          "[sim][tri-pool]") {
    const ModelConfig hymba = load_model("hymba-1.5b");
    const PoolGeometry geometry{index_t(15) << 30, 16, false};
    REQUIRE(byte_scale(hymba, geometry) == 640);
    for (const auto kind : {PolicyKind::unified_eager, PolicyKind::unified_lazy}) {
        const PoolPlan plan = plan_pool(hymba, geometry, Policy{kind});
        CHECK(plan.kind == HybridKind::mamba_sliding_window);
        CHECK(plan.mode ==
              (kind == PolicyKind::unified_eager ? CompactionMode::eager : CompactionMode::lazy));
        const auto& sides = plan.layout.sub_pools();
        REQUIRE(sides.size() == 3);
        const std::pair<const char*, GrowDirection> order[] = {{"mamba", GrowDirection::up},
                                                               {"swa", GrowDirection::floating},
                                                               {"full", GrowDirection::down}};
        for (std::size_t i = 0; i < 3; ++i) {
            CHECK(sides[i].spec.name == order[i].first);
            CHECK(sides[i].grow() == order[i].second);
            CHECK(sides[i].spec.max_tokens == 0); // unified: no cap
        }
        CHECK(sides[0].spec.entry_bytes == 7168000 / 640);
        CHECK(sides[0].page_size() == 1);
        CHECK(sides[1].spec.entry_bytes == 26880 / 640);
        CHECK(sides[2].spec.entry_bytes == 5760 / 640);
        CHECK(sides[1].page_size() == 16);
        CHECK(sides[2].page_size() == 16);
        // Bytes moved are reported per side in real bytes: full, window, state.
        CHECK(plan.real.first == 5760.0 * 16);
        CHECK(plan.real.second == 26880.0 * 16);
        CHECK(plan.real.third == 7168000.0);
    }

    // The engine default: every side capped at its share, the window band
    // starting where the state share ends.
    const Policy split = engine_default_split(hymba);
    const PoolPlan plan = plan_pool(hymba, geometry, split);
    CHECK(plan.mode == CompactionMode::lazy);
    const index_t bytes = geometry.memory_bytes / 640;
    const double shares[3] = {split.state_fraction,
                              1.0 - split.state_fraction - split.full_fraction,
                              split.full_fraction};
    index_t capped = 0;
    for (std::size_t i = 0; i < 3; ++i) {
        const SubPoolGeometry& side = plan.layout.sub_pool(i);
        const double share = shares[i] * static_cast<double>(bytes);
        const auto cap_bytes = static_cast<double>(side.spec.max_tokens * side.spec.entry_bytes);
        INFO(side.spec.name);
        CHECK(side.spec.max_tokens % side.page_size() == 0);
        CHECK(cap_bytes <= share);
        CHECK(cap_bytes > share - 2.0 * static_cast<double>(side.page_bytes));
        capped += side.spec.max_tokens * side.spec.entry_bytes;
    }
    CHECK(capped <= bytes);
    CHECK(plan.layout.sub_pool("swa").spec.float_at == split.state_fraction);
    // 47% of 15 GiB in state slots of 6.8 MiB: 1064 slots.
    CHECK(plan.layout.sub_pool("mamba").spec.max_tokens == 1064);
}

TEST_CASE("tri-pool knobs: SGLang's two ratios set the three shares, and back", "[sim][tri-pool]") {
    const ModelConfig hymba = load_model("hymba-1.5b");
    const auto knobs = engine_ratios(hymba);
    REQUIRE(knobs.size() == 2);
    CHECK(std::string(knobs[0].flag) == "--mamba-full-memory-ratio");
    CHECK(std::string(knobs[1].flag) == "--swa-full-tokens-ratio");
    // State : KV = 0.9 : 1; the KV memory holds 0.8 window tokens per full token.
    const Policy split = fixed_split_at(hymba, {0.9, 0.8});
    CHECK(split == engine_default_split(hymba));
    CHECK(split.state_fraction == Approx(0.9 / 1.9));
    CHECK(split.full_fraction == Approx(1.0 / 1.9 * 5760.0 / (5760.0 + 0.8 * 26880.0)));
    const auto back = engine_ratios_of(hymba, split);
    REQUIRE(back.size() == 2);
    CHECK(back[0] == Approx(0.9));
    CHECK(back[1] == Approx(0.8));
    CHECK(engine_arguments(hymba, split) ==
          "--mamba-full-memory-ratio 0.90 --swa-full-tokens-ratio 0.80");
    // A pair has its one knob.
    CHECK(engine_ratios(load_model("gemma3-27b")).size() == 1);
    CHECK(engine_default_split(load_model("qwen3-next-80b")).state_fraction == 0.0);
}

TEST_CASE("tri-pool sweep: a 2-D grid over both knobs and the engine default", "[sim][tri-pool]") {
    const ModelConfig hymba = load_model("hymba-1.5b");
    CHECK(default_sweep_points(hymba) == 5);
    CHECK(default_sweep_points(load_model("gemma3-27b")) == 19);
    const std::vector<Policy> splits = sweep_splits(hymba, 5);
    REQUIRE(splits.size() == 5 * 5 + 1);
    CHECK(std::count(splits.begin(), splits.end(), engine_default_split(hymba)) == 1);
    CHECK(std::is_sorted(splits.begin(), splits.end(), [](const Policy& a, const Policy& b) {
        return std::make_pair(a.state_fraction, a.full_fraction) <
               std::make_pair(b.state_fraction, b.full_fraction);
    }));
    // Each knob on its own axis: the Mamba ratio follows the state share
    // alone, the window ratio the full side's share of the KV bytes alone.
    std::set<long> mamba_ratios, window_ratios;
    for (const Policy& p : splits) {
        CHECK(p.kind == PolicyKind::fixed_split);
        CHECK(p.state_fraction > 0.0);
        CHECK(p.full_fraction > 0.0);
        CHECK(p.state_fraction + p.full_fraction < 1.0);
        if (p == engine_default_split(hymba))
            continue;
        const auto ratios = engine_ratios_of(hymba, p);
        mamba_ratios.insert(std::lround(ratios[0] * 1000));
        window_ratios.insert(std::lround(ratios[1] * 1000));
        const double kv_full_share = p.full_fraction / (1.0 - p.state_fraction);
        CHECK(kv_full_share * 6.0 == Approx(std::round(kv_full_share * 6.0)));
    }
    // State shares 1/6 .. 5/6: state bytes per KV byte 0.2, 0.5, 1, 2 and 5.
    CHECK(mamba_ratios == std::set<long>{200, 500, 1000, 2000, 5000});
    CHECK(window_ratios.size() == 5);
    CHECK(sweep_splits(hymba, 2).size() == 2 * 2 + 1);
    // A pair's sweep stays one-dimensional.
    const auto pair = sweep_splits(load_model("gemma3-27b"), 19);
    CHECK(pair.size() == 20);
    CHECK(std::all_of(pair.begin(), pair.end(),
                      [](const Policy& p) { return p.state_fraction == 0.0; }));
}

TEST_CASE("tri-pool fit is exact on an empty pool", "[sim][tri-pool][scheduler]") {
    // 24 bytes, a 4-byte sink: 20 bytes for a slot of 4 and n tokens of one
    // byte on each KV side, wherever the floating band starts.
    for (auto mode : both_modes)
        for (index_t tokens = 1; tokens <= 10; ++tokens) {
            CAPTURE(to_string(mode), tokens);
            auto pool = tri_pool(24, 4, 1, 1, 1, mode);
            const bool fits = pool->fits({tokens, tokens, 1});
            CHECK(fits == (4 + 2 * tokens <= 20));
            RequestKv kv;
            CHECK(pool->prefill(kv, tokens) == fits);
            pool->check_invariants();
            if (fits) {
                CHECK(pool->stats().live_third_entries == 1);
                pool->release(kv);
            }
            CHECK(pool->stats().live_third_entries == 0);
        }
    // Each side's cap binds in a fixed split: two slots fit the bytes, not the state side's cap.
    PoolLayout layout(64, {{"mamba", 4, 1, GrowDirection::up, 1},
                           {"swa", 1, 1, GrowDirection::floating, 0},
                           {"full", 1, 1, GrowDirection::down, 0}});
    TriSimPool<HostSpace> capped(layout, CompactionMode::lazy, RealPageBytes{1.0, 1.0, 1.0});
    CHECK(capped.fits({4, 4, 1}));
    CHECK_FALSE(capped.fits({4, 4, 2}));
}

TEST_CASE("a tri-pool request holds KV on both sides and a state slot; old window pages leave",
          "[sim][tri-pool][scheduler]") {
    for (auto mode : both_modes) {
        auto pool = tri_pool(1024, 8, 1, 1, 1, mode);
        const std::vector<RequestSpec> requests{{0.0, 3, 5}};
        Scheduler scheduler(*pool, requests, one_second_steps(4, true));
        scheduler.step(); // prefill 3 tokens on both KV sides, and a slot
        CHECK(pool->stats().live_full_tokens == 3);
        CHECK(pool->stats().live_second_entries == 3);
        CHECK(pool->stats().live_third_entries == 1);
        scheduler.step();
        scheduler.step();
        scheduler.step();
        // 6 tokens: positions 0 and 1 left the window of 4 on the sliding-window side.
        CHECK(pool->stats().live_full_tokens == 6);
        CHECK(pool->stats().live_second_entries == 4);
        CHECK(pool->stats().live_third_entries == 1);
        const RunResult r = run_all(scheduler);
        CHECK(r.steps == 6);
        CHECK(r.completed == 1);
        CHECK(r.completed_tokens == 8);
        check_conservation(r, *pool);
    }
}

TEST_CASE("a retracted tri-pool request gives back its slot and KV, and comes back",
          "[sim][tri-pool][scheduler]") {
    // 22 bytes, a 4-byte sink: 18 bytes. Two requests of 2 tokens take a slot of
    // 4 and 2 + 2 bytes of KV each (16); decoding both needs 4 more.
    for (auto mode : both_modes) {
        auto pool = tri_pool(22, 4, 1, 1, 1, mode);
        const std::vector<RequestSpec> requests{{0.0, 2, 2}, {0.0, 2, 2}};
        Scheduler scheduler(*pool, requests, one_second_steps(1000, true));
        scheduler.step(); // both admitted
        CHECK(scheduler.running_count() == 2);
        CHECK(pool->stats().live_third_entries == 2);
        scheduler.step(); // no room for both tokens: the second is retracted, slot and all
        CHECK(scheduler.running_count() == 1);
        CHECK(scheduler.result().retractions == 1);
        CHECK(pool->stats().live_full_tokens == 3);
        CHECK(pool->stats().live_second_entries == 3);
        CHECK(pool->stats().live_third_entries == 1);
        const RunResult r = run_all(scheduler);
        CHECK(r.completed == 2);
        CHECK(r.aborted == 0);
        CHECK(r.retractions >= 1);
        check_conservation(r, *pool);
    }
}

TEST_CASE("tri-pool memory too small for one page of each side is refused", "[sim][tri-pool]") {
    const ModelConfig hymba = load_model("hymba-1.5b");
    const std::vector<RequestSpec> requests{{0.0, 1000, 10}};
    CHECK_THROWS_WITH(
        check_memory_holds(hymba, PoolGeometry{index_t(8) << 20, 16, false}, requests),
        ContainsSubstring("does not hold one page of each side (90.0 KiB per full page, 26.2 KiB "
                          "per sliding-window KV entry, 6.8 MiB per Mamba state entry)"));
    CHECK_THROWS_WITH(
        check_memory_holds(hymba, PoolGeometry{index_t(40) << 20, 16, false}, requests),
        ContainsSubstring("--memory 40.0 MiB is too small: request 1"));
    CHECK_NOTHROW(check_memory_holds(hymba, PoolGeometry{index_t(1) << 30, 16, false}, requests));
}
