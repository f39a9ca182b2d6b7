// Fuzz target: the tri-pool against the reference model (the differential
// test's TriRun, every decision drawn from the input).
#include "fuzz_run.hpp"
#include "tri_pool_run.hpp"

KVPOOL_FUZZ_TARGET(kvpool::test::tri_run::TriRun, kvpool::test::tri_run::all_configs())
