// A sliding-window side with pages smaller than the full side's
// (--swa-page-size, issue #30), on the SWA pair and on the tri-pool (Mamba +
// sliding-window + full attention): the window leaves one sliding-window page
// at a time, a whole run releases everything it allocated on every policy, and
// the program runs a divisor of the page and refuses a page size it cannot run.
#include "experiment.hpp"
#include "model_config.hpp"
#include "pool_plan.hpp"
#include "scheduler.hpp"
#include "sim_backend.hpp"
#include "sim_test_support.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdio>
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

// The program's exit status and stderr; its stdout goes to out_path.
std::pair<int, std::string> run_program(const std::string& args, const std::string& out_path) {
    const std::string err_path = out_path + ".err";
    const std::string command = std::string(KVPOOL_SIM_PROGRAM) + " --no-progress " + args + " >" +
                                out_path + " 2>" + err_path;
    const int status = std::system(command.c_str());
    std::ifstream in(err_path);
    std::ostringstream err;
    err << in.rdbuf();
    std::filesystem::remove(err_path);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, err.str()};
}

std::string file_text(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// One request of a 10-token prompt under a window of 4 at full pages of 4 (3 full pages,
// 12 sliding-window tokens bound with them), stepped: the sliding-window tokens still bound
// after each of the first three steps, then everything released. With state_slots the
// request also holds one state slot throughout (the tri-pool).
void check_window_release(SimPool& pool, bool state_slots, const index_t (&live_window)[3]) {
    const std::vector<RequestSpec> requests{{0.0, 10, 8}};
    Scheduler scheduler(pool, requests, one_second_steps(4, state_slots));
    for (index_t live : live_window) {
        scheduler.step();
        CHECK(pool.stats().live_second_entries == live);
        if (state_slots)
            CHECK(pool.stats().live_third_entries == 1);
    }
    const RunResult r = run_all(scheduler);
    CHECK(r.completed == 1);
    CHECK(r.tokens_allocated() == r.tokens_released());
    CHECK(pool.stats().live_full_tokens == 0);
    CHECK(pool.stats().live_second_entries == 0);
    CHECK(pool.stats().live_third_entries == 0);
    CHECK(pool.stats().pages_allocated == pool.stats().pages_freed);
    pool.check_invariants();
}

// Runs the experiment (the compared policies and the sweep's fixed splits), checks that every
// policy released all it allocated, and returns the unified (lazy) pool's mean running requests.
double unified_running_releasing_all(const ModelConfig& model, const Workload& workload,
                                     const PoolGeometry& geometry, int sweep_points) {
    ExperimentConfig config;
    config.model = model;
    config.geometry = geometry;
    config.scheduler.step_time = *model.step_time;
    config.sweep_points = sweep_points;
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
    return result.unified_lazy.result.mean_running();
}

// Step 1: 6 tokens before the window: 3 pages of 2 leave (12 - 6), 1 of 4 (12 - 4).
// Step 2: 7 before it: still 3 pages of 2, 1 of 4.
// Step 3: 8 before it: 4 pages of 2 (12 - 8), 2 of 4 (12 - 8).
struct WindowRelease {
    index_t window_page;
    index_t live_window_tokens[3]; // after steps 1, 2, 3 (10, 11, 12 tokens)
};
const WindowRelease window_releases[] = {{2, {6, 6, 4}}, {4, {8, 8, 4}}};

} // namespace

TEST_CASE("swa page size: the window leaves one sliding-window page at a time",
          "[sim][swa-page-size]") {
    for (const WindowRelease& e : window_releases)
        for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
            INFO("window page " << e.window_page << ", " << to_string(mode));
            auto pool = swa_pool(4096, 1, 1, 4, mode, e.window_page);
            CHECK(pool->window_page_size() == e.window_page);
            check_window_release(*pool, false, e.live_window_tokens);
        }
}

TEST_CASE("tri-pool swa page size: the window leaves one sliding-window page at a time",
          "[sim][tri-pool][swa-page-size]") {
    for (const WindowRelease& e : window_releases)
        for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
            INFO("window page " << e.window_page << ", " << to_string(mode));
            auto pool = tri_pool(4096, 8, 1, 1, 4, mode, e.window_page);
            CHECK(pool->window_page_size() == e.window_page);
            check_window_release(*pool, true, e.live_window_tokens);
        }
}

TEST_CASE("swa page size: every policy releases all it allocated, and the unified pool runs at "
          "least as many requests with the smaller page",
          "[sim][swa-page-size]") {
    // GPT-OSS-like, window 128, full pages of 256: at most 128 + 255 + 256
    // sliding-window tokens a request at pages of 256, 128 + 15 + 256 at 16.
    const ModelConfig model = load_model("gpt-oss-120b");
    SyntheticOptions options = default_synthetic_options(SyntheticKind::chat);
    options.requests = 200;
    const Workload workload = synthetic_workload(options);
    double unified_running[2] = {};
    for (index_t window_page : {index_t(256), index_t(16)}) {
        INFO("window page " << window_page);
        unified_running[window_page == 16] = unified_running_releasing_all(
            model, workload, PoolGeometry{index_t(2) << 30, 256, false, window_page}, 3);
    }
    CHECK(unified_running[1] >= unified_running[0]);
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
        unified_running[window_page == 16] = unified_running_releasing_all(
            model, workload, PoolGeometry{index_t(1) << 30, 64, false, window_page}, 2);
    }
    CHECK(unified_running[1] >= unified_running[0]);
}

TEST_CASE("swa page size: a page size the simulator cannot run exits 2 naming it, writing nothing",
          "[sim][swa-page-size]") {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("kvpool_sim_swa_page_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const std::string out = (dir / "stdout.txt").string();
    const std::string json = (dir / "out.json").string();

    auto [status, err] =
        run_program("--model gpt-oss-120b --page-size 256 --swa-page-size 48 --json " + json, out);
    CHECK(status == 2);
    CHECK_THAT(err, ContainsSubstring("--swa-page-size 48 does not divide the page size 256"));
    std::tie(status, err) = run_program("--model qwen3-next-80b --swa-page-size 8", out);
    CHECK(status == 2);
    CHECK_THAT(err, ContainsSubstring("qwen3-next-80b has no sliding-window layers"));
    std::tie(status, err) = run_program("--swa-page-size 0", out);
    CHECK(status == 2);
    CHECK_THAT(err, ContainsSubstring("--swa-page-size"));
    CHECK_FALSE(std::filesystem::exists(json));

    // The page size equal to the page runs as without the option; a divisor runs and says so.
    std::tie(status, err) = run_program(
        "--model hymba-1.5b --page-size 64 --swa-page-size 64 --requests 20 --sweep 1", out);
    CHECK(status == 0);
    std::tie(status, err) = run_program("--model gpt-oss-120b --memory 2GiB --page-size 256 "
                                        "--swa-page-size 16 --requests 50 --sweep 2 --json " +
                                            json,
                                        out);
    CHECK(status == 0);
    CHECK(err.empty());
    CHECK_THAT(file_text(out),
               ContainsSubstring("pages of 256 tokens (16 on the sliding-window side)"));
    CHECK_THAT(file_text(json), ContainsSubstring("\"swa_page_size\": 16"));

    // The tri-pool preset runs it too.
    std::tie(status, err) = run_program("--model hymba-1.5b --page-size 64 --swa-page-size 16 "
                                        "--requests 30 --sweep 1 --json " +
                                            json,
                                        out);
    CHECK(status == 0);
    CHECK(err.empty());
    CHECK_THAT(file_text(out),
               ContainsSubstring("pages of 64 tokens (16 on the sliding-window side)"));
    CHECK_THAT(file_text(json), ContainsSubstring("\"swa_page_size\": 16"));
    std::filesystem::remove_all(dir);
}
