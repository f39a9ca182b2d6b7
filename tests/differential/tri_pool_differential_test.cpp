// Differential test of the tri-pool (UnifiedMambaSWAAllocator: state slots,
// floating sliding-window KV, full KV in one buffer) against the reference
// model's ReferenceTriPool: random mixes of admissions (state slots, then the
// prompts' KV), extends, decodes, frees, window evictions, flushes,
// allocations beyond the capacity views and speculative-decoding windows, in
// eager, lazy and mixed modes on page sizes 1 and 16 (and, decoupled, the
// sliding-window side's page a divisor of the full side's), with the engine's
// forward events set, pending and fired. After every step: the joint and
// per-side views, the floating band's anchor and gaps, every side's tables,
// hole list, free ids and pending pages, and the tombstones are compared; the
// promise of each capacity view is probed on copies of the cores;
// check_invariants() runs on all three sides; the KV data check (each kind's
// bytes stamped with its virtual id) runs after every step that can move a
// page (compaction, flush, band shift) and every 50th step.
//
// Reproduce one seed: kvpool_tests_<backend> "[tri-differential]" --kvpool-seed N
#include "tri_pool_run.hpp"

using namespace kvpool;
using namespace kvpool::test;
using namespace kvpool::test::tri_run;

TEST_CASE("tri-pool differential: the tri-pool against the reference model",
          "[tri-differential][tri-pool][randomised]") {
    // Every configuration, then the decoupled page sizes (a list of its own:
    // all_configs() is what the fuzz corpus maps onto).
    std::vector<Config> configs = all_configs();
    const std::vector<Config> decoupled = decoupled_configs();
    configs.insert(configs.end(), decoupled.begin(), decoupled.end());
    run_differential("tri-differential", configs, [](std::uint64_t seed, const Config& c, int ops) {
        return std::make_unique<TriRun>(seed, c, ops);
    });
}
