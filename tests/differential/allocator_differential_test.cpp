// Differential test of one allocator side and its peer: random operation mixes
// on a two-sided pool, with the engine's forward events set, pending and fired
// across allocations, every step compared with the reference model
// (reference_model.hpp): sizes, the exact ids every allocation returns, the
// physical page of every virtual page, the hole list and the free ids in reuse
// order, the pages pending reuse; an allocation of schedulable_available_size()
// probed on copies of the cores; check_invariants(); and the KV data check
// (bytes stamped with their virtual id must survive every compaction).
//
// Reproduce one seed: kvpool_tests_<backend> "[differential]" --kvpool-seed N
// (--kvpool-ops N changes the operations per seed, --kvpool-seeds K the count).
#include "side_run.hpp"

using namespace kvpool;
using namespace kvpool::test;
using namespace kvpool::test::side_run;

namespace {

void run_side_differential(CompactionMode mode) {
    std::vector<Config> configs;
    for (const Config& c : all_configs())
        if (c.mode == mode)
            configs.push_back(c);
    run_differential("differential", configs, [](std::uint64_t seed, const Config& c, int ops) {
        return std::make_unique<SideRun>(seed, c, ops);
    });
}

} // namespace

TEST_CASE("differential: eager allocator against the reference model", "[differential][eager]") {
    run_side_differential(CompactionMode::eager);
}

TEST_CASE("differential: lazy allocator against the reference model", "[differential][lazy]") {
    run_side_differential(CompactionMode::lazy);
}
