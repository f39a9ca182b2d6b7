// End-to-end comparisons: the built-in default run's invariants, and a
// hand-built case where one side of a fixed split idles.
#include "experiment.hpp"
#include "model_config.hpp"
#include "sim_backend.hpp"
#include "sim_test_support.hpp"

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>

using namespace kvpool;
using namespace kvpool::sim;
using kvpool::sim::test::QuietObserver;

namespace {

void check_run(const RunResult& r, const Workload& workload, bool every_request_completes) {
    // Every token allocated was released exactly once, and the pool is empty.
    CHECK(r.tokens_allocated() == r.tokens_released());
    CHECK(r.pool.live_full_tokens == 0);
    CHECK(r.pool.live_second_entries == 0);
    CHECK(r.pool.live_third_entries == 0);
    CHECK(r.pool.pages_allocated == r.pool.pages_freed);
    CHECK(r.completed + r.aborted == workload.requests.size());
    CHECK(r.decode_tokens + r.prefill_tokens - r.recomputed_tokens >=
          r.completed_tokens - r.retracted_tokens); // recomputation only repeats released tokens
    if (every_request_completes) {
        CHECK(r.completed == workload.requests.size());
        CHECK(r.completed_tokens == total_tokens(workload.requests));
    }
    CHECK(r.mean_running() <= static_cast<double>(r.peak_running));
}

} // namespace

TEST_CASE("the built-in default run keeps the table's invariants", "[sim][end-to-end]") {
    ExperimentConfig config;
    config.model = load_model("gemma3-27b");
    config.geometry = PoolGeometry{config.model.kv_memory_bytes, 16, false};
    config.scheduler.step_time = *config.model.step_time;
    const Workload workload = synthetic_workload(default_synthetic_options(SyntheticKind::chat));
    QuietObserver quiet;
    const ExperimentResult result =
        run_experiment(config, workload, pool_factory(Backend::host), quiet);

    const auto rows = result.compared();
    for (const PolicyRun* row : rows)
        check_run(row->result, workload, true);
    for (const PolicyRun& run : result.sweep)
        check_run(run.result, workload, false);

    // The engine default is one of the sweep's points.
    const auto& engine_default = result.sweep[result.engine_default].policy;
    CHECK(std::abs(engine_ratios_of(config.model, engine_default)[0] - 0.8) < 1e-9);
    // The oracle is the best of the ratios it swept.
    const auto best = std::max_element(
        result.sweep.begin(), result.sweep.end(),
        [](const auto& a, const auto& b) { return better_run(b.result, a.result); });
    CHECK(&*best == &result.sweep[result.oracle]);
    double best_rate = 0.0;
    for (const auto& run : result.sweep)
        if (run.result.aborted == 0)
            best_rate = std::max(best_rate, run.result.completed_per_second());
    CHECK(result.sweep[result.oracle].result.completed_per_second() == best_rate);
    CHECK(result.sweep.size() == 20);
    // Eager and lazy compaction make the same scheduling decisions; lazy moves less.
    CHECK(rows[0]->result.steps == rows[1]->result.steps);
    CHECK(rows[1]->result.pool.pages_moved < rows[0]->result.pool.pages_moved);
    // The unified pool runs more requests at once than the engine's default split.
    CHECK(rows[1]->result.mean_running() > rows[2]->result.mean_running());
    CHECK(rows[1]->result.completed_per_second() >= rows[2]->result.completed_per_second());
}

TEST_CASE("unified is never below a fixed split whose window side idles", "[sim][end-to-end]") {
    // Equal bytes per token on both sides, a window of 32 tokens and requests of
    // thousands: at the default ratio 0.8 the window side gets 44% of the bytes
    // and uses a few percent of them, while the full side runs out.
    ExperimentConfig config;
    config.model = parse_model_config(R"(
name = idle-window
kind = sliding_window
kv_dtype_bytes = 2
kv_heads = 1
head_dim = 64
full_attention_layers = 4
sliding_window_layers = 4
sliding_window = 32
kv_memory = 64MiB
)",
                                      "adversarial");
    config.geometry = PoolGeometry{config.model.kv_memory_bytes, 16, false};
    config.scheduler.step_time = StepTimeModel{0.01, 10e-6, 50e-6};
    config.sweep_points = 4;
    Workload workload;
    for (int i = 0; i < 200; ++i)
        workload.requests.push_back({0.001 * i, 2000 + 37 * (i % 11), 300 + 13 * (i % 7)});
    QuietObserver quiet;
    const ExperimentResult result =
        run_experiment(config, workload, pool_factory(Backend::host), quiet);
    const auto rows = result.compared();
    const RunResult& fixed = rows[2]->result;
    for (const PolicyRun* unified : {rows[0], rows[1]}) {
        check_run(unified->result, workload, true);
        CHECK(unified->result.completed_per_second() >= fixed.completed_per_second());
        CHECK(unified->result.mean_running() > 1.5 * fixed.mean_running());
        CHECK(unified->result.retractions <= fixed.retractions);
    }
    check_run(fixed, workload, true);
}

namespace {

// The phases partition the requests, and their figures add up to the run's.
void check_phases_add_up(const RunResult& r, const Workload& workload) {
    REQUIRE(r.phases.size() == workload.phases.size());
    std::size_t completed = 0;
    std::size_t aborted = 0;
    index_t retractions = 0;
    index_t peak = 0;
    double seconds = 0.0;
    double running_request_seconds = 0.0;
    for (std::size_t p = 0; p < r.phases.size(); ++p) {
        const PhaseResult& phase = r.phases[p];
        CHECK(phase.completed + phase.aborted == workload.phases[p].requests);
        CHECK(phase.first_admitted_s <= phase.last_finished_s);
        CHECK(phase.last_finished_s <= r.sim_seconds);
        if (p > 0)
            CHECK(r.phases[p - 1].first_admitted_s <= phase.first_admitted_s);
        CHECK(phase.mean_running() <= static_cast<double>(phase.peak_running));
        completed += phase.completed;
        aborted += phase.aborted;
        retractions += phase.retractions;
        peak = std::max(peak, phase.peak_running);
        seconds += phase.sim_seconds;
        running_request_seconds += phase.running_request_seconds;
    }
    CHECK(completed == r.completed);
    CHECK(aborted == r.aborted);
    CHECK(retractions == r.retractions);
    CHECK(peak == r.peak_running);
    CHECK(seconds == Catch::Approx(r.sim_seconds).epsilon(1e-9));
    CHECK(running_request_seconds == Catch::Approx(r.running_request_seconds).epsilon(1e-9));
}

} // namespace

TEST_CASE("a workload shift: per-phase figures add up, each phase names its best split",
          "[sim][end-to-end][phases]") {
    ExperimentConfig config;
    config.model = load_model("gpt-oss-120b");
    // Little memory and no decode reserve: requests are retracted.
    config.geometry = PoolGeometry{index_t(12) << 30, 16, false};
    config.scheduler.step_time = *config.model.step_time;
    config.scheduler.decode_reserve = 0.0;
    config.sweep_points = 5;
    const Workload workload = shift_workload({{SyntheticKind::chat, 150, 50.0},
                                              {SyntheticKind::documents, 12, 5.0},
                                              {SyntheticKind::chat, 150, 50.0}},
                                             7);
    check_memory_holds(config.model, config.geometry, workload.requests);
    QuietObserver quiet;
    const ExperimentResult result =
        run_experiment(config, workload, pool_factory(Backend::host), quiet);

    index_t retractions = 0;
    for (const PolicyRun* row : result.compared()) {
        check_run(row->result, workload, row->policy.kind != PolicyKind::fixed_split);
        check_phases_add_up(row->result, workload);
        retractions += row->result.retractions;
    }
    for (const PolicyRun& run : result.sweep) {
        check_run(run.result, workload, false);
        check_phases_add_up(run.result, workload);
        retractions += run.result.retractions;
    }
    CHECK(retractions > 0);
    // Each phase's best split is the best of the sweep for that phase alone.
    REQUIRE(result.phase_oracles.size() == 3);
    for (std::size_t p = 0; p < 3; ++p)
        for (const PolicyRun& run : result.sweep)
            CHECK_FALSE(better_phase(run.result.phases[p],
                                     result.sweep[result.phase_oracles[p]].result.phases[p]));
}

TEST_CASE("the built-in shift on the Mamba preset: no single fixed split is best in every phase",
          "[sim][end-to-end][phases]") {
    ExperimentConfig config;
    config.model = load_model("qwen3-next-80b");
    config.geometry = PoolGeometry{config.model.kv_memory_bytes, 16, false};
    config.scheduler.step_time = *config.model.step_time;
    const Workload workload = shift_workload(default_shift_phases(), 1);
    QuietObserver quiet;
    const ExperimentResult result =
        run_experiment(config, workload, pool_factory(Backend::host), quiet);
    const auto& best = result.phase_oracles;
    REQUIRE(best.size() == 3);
    CHECK((best[0] != best[1] || best[1] != best[2]));
    // The unified pool runs more requests at once than the engine's default
    // split in every phase, and completes them at least as fast.
    const auto rows = result.compared();
    for (std::size_t p = 0; p < 3; ++p) {
        const PhaseResult& lazy = rows[1]->result.phases[p];
        const PhaseResult& fixed = rows[2]->result.phases[p];
        CHECK(lazy.mean_running() > fixed.mean_running());
        CHECK(lazy.completed_per_second() >= fixed.completed_per_second());
    }
}

TEST_CASE("the tri-pool preset through every policy: invariants hold, every request is accounted "
          "for",
          "[sim][end-to-end][tri-pool]") {
    ExperimentConfig config;
    config.model = load_model("hymba-1.5b");
    // Little memory and no decode reserve: requests are retracted, and the
    // documents need much of the sliding-window side while they prefill. Pages
    // of 64 tokens keep the invariant checks after every step (linear in the
    // pages) short.
    config.geometry = PoolGeometry{index_t(3) << 30, 64, false};
    config.scheduler.step_time = *config.model.step_time;
    config.scheduler.decode_reserve = 0.0;
    config.scheduler.check_invariants_every_step = true;
    config.sweep_points = 2;
    const Workload workload = shift_workload({{SyntheticKind::chat, 60, 50.0},
                                              {SyntheticKind::documents, 4, 5.0},
                                              {SyntheticKind::chat, 60, 50.0}},
                                             3);
    check_memory_holds(config.model, config.geometry, workload.requests);
    QuietObserver quiet;
    const ExperimentResult result =
        run_experiment(config, workload, pool_factory(Backend::host), quiet);

    // A 2 x 2 grid and the engine default.
    REQUIRE(result.sweep.size() == 5);
    const auto defaults =
        engine_ratios_of(config.model, result.sweep[result.engine_default].policy);
    CHECK(std::abs(defaults[0] - 0.9) < 1e-9);
    CHECK(std::abs(defaults[1] - 0.8) < 1e-9);
    index_t retractions = 0;
    for (const PolicyRun* row : result.compared()) {
        check_run(row->result, workload, row->policy.kind != PolicyKind::fixed_split);
        check_phases_add_up(row->result, workload);
        retractions += row->result.retractions;
    }
    for (const PolicyRun& run : result.sweep) {
        check_run(run.result, workload, false);
        check_phases_add_up(run.result, workload);
    }
    CHECK(retractions > 0);
    const auto best = std::max_element(
        result.sweep.begin(), result.sweep.end(),
        [](const auto& a, const auto& b) { return better_run(b.result, a.result); });
    CHECK(&*best == &result.sweep[result.oracle]);
    // One buffer for all three sides runs more requests at once than the engine's split.
    const auto rows = result.compared();
    CHECK(rows[0]->result.steps == rows[1]->result.steps);
    CHECK(rows[1]->result.mean_running() > rows[2]->result.mean_running());
    CHECK(rows[1]->result.pool.pages_moved > 0);
}
