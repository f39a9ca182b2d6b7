// HybridReqToTokenPool under randomised operations against a host model, in
// every mode of the extra buffer (req_table_run.hpp).
//
// Reproduce one seed: kvpool_tests_<backend> "[req-table][randomised]" --kvpool-seed N
#include "req_table_run.hpp"
#include "test_config.hpp"

#include <cstdio>
#include <map>
#include <string>
#include <vector>

using namespace kvpool;
using namespace kvpool::test;
using namespace kvpool::test::req_table_run;

TEST_CASE("hybrid req table: randomised operations against a host model",
          "[req-table][randomised]") {
    const auto& config = randomised_config();
    const std::vector<RandomConfig> configs = all_configs();
    int failures = 0;
    std::map<std::string, RandomStats> totals;
    for (const std::uint64_t seed : config.seed_list()) {
        std::printf("[req-table] seed %llu (%d ops); reproduce: kvpool_tests_%s "
                    "\"[req-table][randomised]\" "
                    "--kvpool-seed %llu\n",
                    static_cast<unsigned long long>(seed), config.ops, KVPOOL_TEST_BACKEND_NAME,
                    static_cast<unsigned long long>(seed));
        std::fflush(stdout);
        for (const auto& c : configs) {
            RandomRun run(seed, c, config.ops);
            try {
                run.run();
            } catch (const Mismatch& e) {
                ++failures;
                std::printf("%s\n", e.what());
                std::fflush(stdout);
                FAIL_CHECK(e.what());
            }
            totals[c.name].add(run.stats());
        }
    }
    for (const auto& [name, t] : totals)
        std::printf("[req-table] %s: allocs ok %ld, failed %ld, adopting %ld; finished %ld (track "
                    "slot kept %ld); "
                    "donations %ld; on-demand track slots %ld; writes %ld; misuse rejected %ld; "
                    "clears %ld\n",
                    name.c_str(), t.allocs, t.failed_allocs, t.adoptions, t.finished, t.kept,
                    t.donations, t.on_demand, t.writes, t.rejected, t.clears);
    std::fflush(stdout);
    CHECK(failures == 0);
}
