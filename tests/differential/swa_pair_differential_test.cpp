// Differential test of the SWA pair (UnifiedSWAAllocator) against the
// reference model's ReferenceSwaPair: random operation mixes, with the
// engine's forward events set, pending and fired across allocations; after
// every step the joint and per-side views, both sides' tables, hole lists,
// free ids and pending pages, and the SWA tombstones are compared, an
// allocation of each lower-bound view is probed on copies of the cores,
// check_invariants() runs on both sides, and the KV data check (each side's
// bytes stamped with their virtual id) runs after every step that can compact
// and every 50th step. Decoupled configurations give the SWA side a smaller
// page than the full side's.
//
// Reproduce one seed: kvpool_tests_<backend> "[swa-differential]" --kvpool-seed N
#include "swa_run.hpp"

using namespace kvpool;
using namespace kvpool::test;
using namespace kvpool::test::swa_run;

TEST_CASE("swa pair differential: the SWA pair against the reference model",
          "[swa-differential][pair-differential]") {
    // Every pair configuration, and the SWA side's pages 2, 4 and 16 times
    // smaller than the full side's (decoupled page sizes).
    std::vector<PairConfig> configs = pair_configs();
    configs.push_back({CompactionMode::eager, CompactionMode::eager, 16, 4});
    configs.push_back({CompactionMode::lazy, CompactionMode::lazy, 16, 4});
    configs.push_back({CompactionMode::lazy, CompactionMode::eager, 16, 1});
    configs.push_back({CompactionMode::eager, CompactionMode::lazy, 4, 2});
    run_differential("swa-differential", configs,
                     [](std::uint64_t seed, const PairConfig& c, int ops) {
                         return std::make_unique<SwaRun>(seed, c, ops);
                     });
}
