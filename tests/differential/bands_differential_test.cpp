// Differential test of N bands in one buffer (one growing up, one to three
// floating, one growing down; each side owning its ids, page sizes and entry
// bytes mixed) against ReferenceSides linked as neighbours: random mixes of
// allocations (of a few pages, of each side's schedulable size, and beyond
// it), frees, flushes and the engine's forward events, eager and lazy on page
// sizes up to 1 and 16. After every step each side's views, floating anchors
// and gaps, tables, hole list, free ids and pending pages are compared, each
// side's schedulable size is probed on copies of every core, the bands are
// checked to lie in order, check_invariants() runs on every side, and the KV
// data check runs after every step that can move a page and every 50th step.
//
// Reproduce one seed: kvpool_tests_<backend> "[bands-differential]" --kvpool-seed N
#include "bands_run.hpp"

using namespace kvpool;
using namespace kvpool::test;
using namespace kvpool::test::bands_run;

TEST_CASE("bands differential: N bands with floating ones against the reference model",
          "[bands-differential][floating][randomised]") {
    run_differential("bands-differential", all_configs(),
                     [](std::uint64_t seed, const Config& c, int ops) {
                         return std::make_unique<BandsRun>(seed, c, ops);
                     });
}
