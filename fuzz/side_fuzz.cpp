// Fuzz target: one allocator side and its peer against the reference model
// (the differential test's SideRun, every decision drawn from the input).
#include "fuzz_run.hpp"
#include "side_run.hpp"

using namespace kvpool;
using kvpool::test::side_run::Config;
using kvpool::test::side_run::SideRun;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::start_kokkos();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::vector<Config> configs = kvpool::test::side_run::all_configs();
    fuzz::run_input<SideRun>(configs, data, size);
    return 0;
}
