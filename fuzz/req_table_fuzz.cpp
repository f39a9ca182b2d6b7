// Fuzz target: the hybrid request table (request slots, Mamba and track state slots, row writes)
// against its host model (the randomised test's RandomRun, every decision drawn from the input).
#include "fuzz_run.hpp"
#include "req_table_run.hpp"

KVPOOL_FUZZ_TARGET(kvpool::test::req_table_run::RandomRun,
                   kvpool::test::req_table_run::all_configs())
