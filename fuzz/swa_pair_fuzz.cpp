// Fuzz target: the SWA pair against the reference model (the differential
// test's SwaRun, every decision drawn from the input).
#include "fuzz_run.hpp"
#include "swa_run.hpp"

KVPOOL_FUZZ_TARGET(kvpool::test::swa_run::SwaRun, kvpool::test::pair_configs())
