// Fuzz target: one allocator side and its peer against the reference model
// (the differential test's SideRun, every decision drawn from the input).
#include "fuzz_run.hpp"
#include "side_run.hpp"

KVPOOL_FUZZ_TARGET(kvpool::test::side_run::SideRun, kvpool::test::side_run::all_configs())
