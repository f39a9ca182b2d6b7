// The scheduler model on tiny pools whose every step can be worked out by hand.
// Every step also checks the allocators' invariants.
#include "scheduler.hpp"
#include "sim_test_support.hpp"

#include <catch2/catch_test_macros.hpp>

using namespace kvpool;
using namespace kvpool::sim;
using namespace kvpool::sim::test;

namespace {

constexpr CompactionMode both_modes[] = {CompactionMode::eager, CompactionMode::lazy};

void check_conservation(const RunResult& r, const SimPool& pool) {
    CHECK(r.tokens_allocated() == r.tokens_released());
    CHECK(pool.stats().live_full_tokens == 0);
    CHECK(pool.stats().live_second_entries == 0);
    CHECK(pool.stats().pages_allocated == pool.stats().pages_freed);
}

} // namespace

TEST_CASE("two-sided fit is exact on an empty unified pool", "[sim][scheduler]") {
    // 21 bytes, a 1-byte sink: 20 bytes of gap, 10 tokens with one byte on each side.
    for (auto mode : both_modes) {
        auto pool = swa_pool(21, 1, 1, 1, mode);
        CHECK(pool->fits({10, 10, 0}));
        CHECK_FALSE(pool->fits({11, 10, 0}));
        CHECK(pool->fits({20, 0, 0}));
        CHECK_FALSE(pool->fits({21, 0, 0}));
    }
}

TEST_CASE("one request prefills, decodes one token per step, and leaves", "[sim][scheduler]") {
    for (auto mode : both_modes) {
        auto pool = swa_pool(1024, 1, 1, 1, mode);
        const std::vector<RequestSpec> requests{{0.0, 3, 5}};
        Scheduler scheduler(*pool, requests, one_second_steps(4, false));
        // Step 1 prefills 3 tokens; steps 2..6 decode 5 tokens.
        scheduler.step();
        CHECK(pool->stats().live_full_tokens == 3);
        CHECK(pool->stats().live_second_entries == 3);
        scheduler.step();
        scheduler.step();
        scheduler.step();
        // 6 tokens: positions 0 and 1 left the window of 4 on the sliding-window side.
        CHECK(pool->stats().live_full_tokens == 6);
        CHECK(pool->stats().live_second_entries == 4);
        const RunResult r = run_all(scheduler);
        CHECK(r.steps == 6);
        CHECK(r.sim_seconds == 6.0);
        CHECK(r.completed == 1);
        CHECK(r.prefill_tokens == 3);
        CHECK(r.decode_tokens == 5);
        CHECK(r.completed_tokens == 8);
        CHECK(r.mean_running() == 1.0);
        CHECK(r.peak_running == 1);
        check_conservation(r, *pool);
    }
}

TEST_CASE("sliding-window pages leave whole", "[sim][scheduler]") {
    for (auto mode : both_modes) {
        auto pool = swa_pool(4096, 1, 1, 2, mode);
        const std::vector<RequestSpec> requests{{0.0, 6, 4}};
        Scheduler scheduler(*pool, requests, one_second_steps(4, false));
        scheduler.step();
        // 6 tokens in 3 pages; positions below 6 - 4 = 2 fill page 0, which leaves.
        CHECK(pool->stats().live_full_tokens == 6);
        CHECK(pool->stats().live_second_entries == 4);
        scheduler.step();
        // 7 tokens: positions below 3 do not fill page 1 yet; page 3 is new.
        CHECK(pool->stats().live_full_tokens == 8);
        CHECK(pool->stats().live_second_entries == 6);
        scheduler.step();
        // 8 tokens: positions below 4 fill page 1, which leaves.
        CHECK(pool->stats().live_second_entries == 4);
        check_conservation(run_all(scheduler), *pool);
    }
}

TEST_CASE("decode out of memory retracts the newest request, which comes back",
          "[sim][scheduler]") {
    // 10 tokens fit (see the fit test); the sliding window never binds.
    for (auto mode : both_modes) {
        auto pool = swa_pool(21, 1, 1, 1, mode);
        const std::vector<RequestSpec> requests{{0.0, 4, 4}, {0.0, 4, 4}};
        Scheduler scheduler(*pool, requests, one_second_steps(1000, false));
        scheduler.step(); // both prefill: 8 tokens
        CHECK(scheduler.running_count() == 2);
        scheduler.step(); // both decode: 10 tokens
        scheduler.step(); // no room for 2: the second is retracted (5 tokens), the first decodes
        CHECK(scheduler.running_count() == 1);
        CHECK(scheduler.result().retractions == 1);
        CHECK(pool->stats().live_full_tokens == 6);
        scheduler.step(); // the second needs 5 and 4 are free: it waits; the first decodes
        scheduler.step(); // the first finishes (8 tokens)
        CHECK(scheduler.running_count() == 0);
        scheduler.step(); // the second prefills its prompt and its 1 generated token again
        CHECK(pool->stats().live_full_tokens == 5);
        const RunResult r = run_all(scheduler); // steps 7..9 decode its last 3 tokens
        CHECK(r.steps == 9);
        CHECK(r.completed == 2);
        CHECK(r.retractions == 1);
        CHECK(r.retracted_tokens == 5);
        CHECK(r.prefill_tokens == 4 + 4 + 5);
        CHECK(r.recomputed_tokens == 5);
        CHECK(r.decode_tokens == 2 + 1 + 1 + 1 + 3);
        CHECK(r.completed_tokens == 16);
        CHECK(r.peak_running == 2);
        CHECK(r.running_request_seconds == 11.0); // 2 + 2 + 1 * 7
        check_conservation(r, *pool);
    }
}

TEST_CASE("admission keeps the decode reserve free", "[sim][scheduler]") {
    // With half of the remaining output reserved, the second request waits:
    // 4 + ceil(0.5 * (4 + 4)) = 8 full tokens would be needed beside the first's 4.
    auto pool = swa_pool(21, 1, 1, 1, CompactionMode::eager);
    const std::vector<RequestSpec> requests{{0.0, 4, 4}, {0.0, 4, 4}};
    Scheduler scheduler(*pool, requests, one_second_steps(1000, false, 0.5));
    scheduler.step();
    CHECK(scheduler.running_count() == 1);
    const RunResult r = run_all(scheduler);
    CHECK(r.retractions == 0);
    CHECK(r.completed == 2);
    check_conservation(r, *pool);
}

TEST_CASE("a request that cannot fit even alone is aborted", "[sim][scheduler]") {
    for (auto mode : both_modes) {
        auto pool = swa_pool(21, 1, 1, 1, mode);
        // 12 prompt tokens never fit; 9 + 3 fit for the prompt, not for the end.
        const std::vector<RequestSpec> requests{{0.0, 12, 1}, {0.0, 9, 3}, {0.0, 2, 2}};
        Scheduler scheduler(*pool, requests, one_second_steps(1000, false));
        const RunResult r = run_all(scheduler);
        CHECK(r.aborted == 2);
        CHECK(r.completed == 1);
        CHECK(r.aborted_tokens == 10); // the second held 10 tokens when its 11th did not fit
        check_conservation(r, *pool);
    }
}

TEST_CASE("a Mamba request holds one state slot while it runs", "[sim][scheduler]") {
    // 16 bytes: a 4-byte sink, 12 bytes of gap. A slot costs 4 bytes, a token 1.
    for (auto mode : both_modes) {
        auto pool = mamba_pool(16, 1, 4, mode);
        const std::vector<RequestSpec> requests{{0.0, 2, 2}, {0.0, 2, 2}};
        Scheduler scheduler(*pool, requests, one_second_steps(0, true));
        scheduler.step(); // both admitted: 2 slots + 4 tokens = 12 bytes
        CHECK(scheduler.running_count() == 2);
        CHECK(pool->stats().live_second_entries == 2);
        scheduler.step(); // no byte left for 2 tokens: the second is retracted, slot and all
        CHECK(scheduler.running_count() == 1);
        CHECK(pool->stats().live_second_entries == 1);
        CHECK(pool->stats().live_full_tokens == 3);
        scheduler.step(); // the second needs 4 + 2 bytes, 5 are free; the first finishes
        CHECK(scheduler.running_count() == 0);
        CHECK(pool->stats().live_second_entries == 0);
        const RunResult r = run_all(scheduler); // step 4 re-admits, steps 5 and 6 decode
        CHECK(r.steps == 6);
        CHECK(r.completed == 2);
        CHECK(r.retractions == 1);
        CHECK(r.recomputed_tokens == 2);
        check_conservation(r, *pool);
    }
}

TEST_CASE("an idle engine jumps to the next arrival", "[sim][scheduler]") {
    auto pool = swa_pool(1024, 1, 1, 1, CompactionMode::lazy);
    const std::vector<RequestSpec> requests{{0.0, 2, 1}, {10.0, 2, 1}};
    Scheduler scheduler(*pool, requests, one_second_steps(1000, false));
    const RunResult r = run_all(scheduler);
    CHECK(r.steps == 4);
    CHECK(r.sim_seconds == 12.0); // steps at 0 and 1, idle until 10, steps at 10 and 11
    CHECK(r.mean_running() == 4.0 / 12.0);
    check_conservation(r, *pool);
}

TEST_CASE("the prefill budget spreads admissions over steps", "[sim][scheduler]") {
    auto pool = swa_pool(4096, 1, 1, 1, CompactionMode::eager);
    const std::vector<RequestSpec> requests{{0.0, 6, 1}, {0.0, 6, 1}, {0.0, 20, 1}};
    SchedulerConfig config = one_second_steps(1000, false);
    config.max_prefill_tokens = 12;
    Scheduler scheduler(*pool, requests, config);
    scheduler.step(); // 6 + 6 fit the budget of 12; the third (20) waits for a step of its own
    CHECK(scheduler.running_count() == 2);
    scheduler.step(); // larger than the budget, it runs alone in its step
    CHECK(scheduler.result().prefill_tokens == 32);
    check_conservation(run_all(scheduler), *pool);
}
