// Latency figures on runs small enough to work out by hand (every step takes
// one simulated second), and the percentile rule itself.
#include "latency.hpp"
#include "scheduler.hpp"
#include "sim_test_support.hpp"

#include <catch2/catch_test_macros.hpp>

#include <numeric>

using namespace kvpool;
using namespace kvpool::sim;
using namespace kvpool::sim::test;

TEST_CASE("latency percentiles are nearest-rank", "[sim][latency]") {
    std::vector<double> hundred(100);
    std::iota(hundred.begin(), hundred.end(), 1.0);
    std::vector<double> shuffled(hundred.rbegin(), hundred.rend());
    const LatencyStats s = summarize(shuffled);
    CHECK(s.count == 100);
    CHECK(s.p50 == 50.0);
    CHECK(s.p90 == 90.0);
    CHECK(s.p99 == 99.0);
    std::vector<double> three{3.0, 1.0, 2.0};
    const LatencyStats t = summarize(three);
    CHECK(t.p50 == 2.0);
    CHECK(t.p90 == 3.0);
    CHECK(t.p99 == 3.0);
    std::vector<double> none;
    CHECK(summarize(none).count == 0);
    CHECK(summarize(none).p99 == 0.0);
}

TEST_CASE("time to first token and queueing, overall and per phase", "[sim][latency]") {
    auto pool = swa_pool(1024, 1, 1, 1, CompactionMode::lazy);
    // A arrives at 0 (phase 0), B at 0.5 (phase 1).
    std::vector<RequestSpec> requests{{0.0, 3, 2}, {0.5, 2, 2}};
    requests[1].phase = 1;
    Scheduler scheduler(*pool, requests, one_second_steps(1000, false));
    const RunResult r = run_all(scheduler);
    // Step [0,1): A prefills; its first token at 1. Step [1,2): B, queued since 0.5,
    // prefills (first token at 2) while A decodes; [2,3): both decode, A ends; [3,4): B ends.
    CHECK(r.steps == 4);
    CHECK(r.latency.ttft.count == 2);
    CHECK(r.latency.ttft.p50 == 1.0);
    CHECK(r.latency.ttft.p99 == 1.5);
    CHECK(r.latency.queueing.p50 == 0.0);
    CHECK(r.latency.queueing.p90 == 0.5);
    CHECK(r.latency.itl.count == 4); // two gaps per request
    CHECK(r.latency.itl.p99 == 1.0);
    CHECK(r.phases[0].latency.ttft.p50 == 1.0);
    CHECK(r.phases[1].latency.ttft.p50 == 1.5);
    CHECK(r.phases[1].latency.queueing.p50 == 0.5);
    REQUIRE(r.first_tokens.size() == 2);
    CHECK(r.first_tokens[1].time_s == 2.0);
    CHECK(r.first_tokens[1].ttft_s == 1.5);
}

TEST_CASE("a retraction's gap is one long inter-token latency", "[sim][latency]") {
    // The run of "decode out of memory retracts the newest request": B is
    // retracted in step 3 after its token at 2, prefilled again in step 6 and
    // decodes its next token at 7.
    for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        auto pool = swa_pool(21, 1, 1, 1, mode);
        const std::vector<RequestSpec> requests{{0.0, 4, 4}, {0.0, 4, 4}};
        Scheduler scheduler(*pool, requests, one_second_steps(1000, false));
        const RunResult r = run_all(scheduler);
        REQUIRE(r.retractions == 1);
        CHECK(r.latency.ttft.count == 2); // the second prefill yields no first token again
        CHECK(r.latency.ttft.p99 == 1.0);
        // Gaps: A 1, 1, 1, 1; B 1, 5, 1, 1.
        CHECK(r.latency.itl.count == 8);
        CHECK(r.latency.itl.p50 == 1.0);
        CHECK(r.latency.itl.p90 == 5.0);
        CHECK(r.latency.queueing.p99 == 0.0); // queueing counts the first admission only
    }
}
