// Fuzz target: the Mamba pair against the reference model (the differential
// test's MambaRun, every decision drawn from the input).
#include "fuzz_run.hpp"
#include "mamba_run.hpp"

KVPOOL_FUZZ_TARGET(kvpool::test::mamba_run::MambaRun, kvpool::test::pair_configs())
