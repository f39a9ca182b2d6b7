// Fuzz target: the Mamba pair against the reference model (the differential test's
// MambaRun, every decision drawn from the input).
#include "fuzz_run.hpp"
#include "mamba_run.hpp"

using namespace kvpool;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::start_kokkos();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::vector<test::PairConfig> configs = test::pair_configs();
    fuzz::run_input<test::mamba_run::MambaRun>(configs, data, size);
    return 0;
}
