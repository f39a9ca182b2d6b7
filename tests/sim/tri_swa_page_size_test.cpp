// The tri-pool (Mamba + sliding-window + full attention) with a sliding-window
// page smaller than the full page (--swa-page-size, issue #30): the window
// leaves one sliding-window page at a time, every policy releases all it
// allocated, and the program runs the option on the tri-pool preset.
#include "experiment.hpp"
#include "model_config.hpp"
#include "pool_plan.hpp"
#include "scheduler.hpp"
#include "sim_backend.hpp"
#include "sim_test_support.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

using namespace kvpool;
using namespace kvpool::sim;
using namespace kvpool::sim::test;
using Catch::Matchers::ContainsSubstring;

namespace {

class QuietObserver final : public RunObserver {
public:
    void run_started(const std::string&, std::size_t, std::size_t) override {}
    void run_progress(double) override {}
    void all_done() override {}
};

} // namespace

TEST_CASE("tri-pool swa page size: the window leaves one sliding-window page at a time",
          "[sim][tri-pool][swa-page-size]") {
    // As for the pair: full pages of 4 tokens, a window of 4, a prompt of 10
    // (3 full pages, 12 sliding-window tokens bound with them), and one state slot.
    struct Expected {
        index_t window_page;
        index_t live_window_tokens[3]; // after steps 1, 2, 3 (10, 11, 12 tokens)
    };
    // Step 1: 6 tokens before the window: 3 pages of 2 leave (12 - 6), 1 of 4 (12 - 4).
    // Step 2: 7 before it: still 3 pages of 2, 1 of 4.
    // Step 3: 8 before it: 4 pages of 2 (12 - 8), 2 of 4 (12 - 8).
    for (const Expected& e : {Expected{2, {6, 6, 4}}, Expected{4, {8, 8, 4}}})
        for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
            INFO("window page " << e.window_page << ", " << to_string(mode));
            auto pool = tri_pool(4096, 8, 1, 1, 4, mode, e.window_page);
            CHECK(pool->window_page_size() == e.window_page);
            const std::vector<RequestSpec> requests{{0.0, 10, 8}};
            Scheduler scheduler(*pool, requests, one_second_steps(4, true));
            for (index_t live : e.live_window_tokens) {
                scheduler.step();
                CHECK(pool->stats().live_second_entries == live);
                CHECK(pool->stats().live_third_entries == 1);
            }
            const RunResult r = run_all(scheduler);
            CHECK(r.completed == 1);
            CHECK(r.tokens_allocated() == r.tokens_released());
            CHECK(pool->stats().live_full_tokens == 0);
            CHECK(pool->stats().live_second_entries == 0);
            CHECK(pool->stats().live_third_entries == 0);
            CHECK(pool->stats().pages_allocated == pool->stats().pages_freed);
            pool->check_invariants();
        }
}

TEST_CASE("tri-pool swa page size: every policy releases all it allocated, and the unified "
          "tri-pool runs at least as many requests with the smaller page",
          "[sim][tri-pool][swa-page-size]") {
    // Hymba-like, window 1024, full pages of 64: at most 1024 + 63 + 64
    // sliding-window tokens a request at pages of 64, 1024 + 15 + 64 at 16.
    const ModelConfig model = load_model("hymba-1.5b");
    SyntheticOptions options = default_synthetic_options(SyntheticKind::chat);
    options.requests = 200;
    const Workload workload = synthetic_workload(options);
    double unified_running[2] = {};
    for (index_t window_page : {index_t(64), index_t(16)}) {
        INFO("window page " << window_page);
        ExperimentConfig config;
        config.model = model;
        config.geometry = PoolGeometry{index_t(1) << 30, 64, false, window_page};
        config.scheduler.step_time = *model.step_time;
        config.sweep_points = 2;
        QuietObserver quiet;
        const ExperimentResult result =
            run_experiment(config, workload, pool_factory(Backend::host), quiet);
        std::vector<const PolicyRun*> runs = result.compared();
        for (const PolicyRun& run : result.sweep)
            runs.push_back(&run);
        CHECK(runs.size() > 3); // the fixed splits of the sweep ran too
        for (const PolicyRun* run : runs) {
            const RunResult& r = run->result;
            CHECK(r.tokens_allocated() == r.tokens_released());
            CHECK(r.pool.live_full_tokens == 0);
            CHECK(r.pool.live_second_entries == 0);
            CHECK(r.pool.live_third_entries == 0);
            CHECK(r.pool.pages_allocated == r.pool.pages_freed);
            CHECK(r.completed + r.aborted == workload.requests.size());
        }
        unified_running[window_page == 16] = result.unified_lazy.result.mean_running();
    }
    CHECK(unified_running[1] >= unified_running[0]);
}

TEST_CASE("tri-pool swa page size: the program runs a divisor of the page and reports it",
          "[sim][tri-pool][swa-page-size]") {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("kvpool_sim_tri_swa_page_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const std::string out = (dir / "stdout.txt").string();
    const std::string json = (dir / "out.json").string();
    const std::string command = std::string(KVPOOL_SIM_PROGRAM) +
                                " --no-progress --model hymba-1.5b --page-size 64 "
                                "--swa-page-size 16 --requests 30 --sweep 1 --json " +
                                json + " >" + out + " 2>" + out + ".err";
    const int status = std::system(command.c_str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(std::filesystem::file_size(out + ".err") == 0);
    std::ifstream table_in(out), json_in(json);
    std::ostringstream table, report;
    table << table_in.rdbuf();
    report << json_in.rdbuf();
    CHECK_THAT(table.str(),
               ContainsSubstring("pages of 64 tokens (16 on the sliding-window side)"));
    CHECK_THAT(report.str(), ContainsSubstring("\"swa_page_size\": 16"));
    std::filesystem::remove_all(dir);
}
