// Fuzz target: N bands with floating ones against the reference model (the
// differential test's BandsRun, every decision drawn from the input).
#include "bands_run.hpp"
#include "fuzz_run.hpp"

KVPOOL_FUZZ_TARGET(kvpool::test::bands_run::BandsRun, kvpool::test::bands_run::all_configs())
