// kvpool-soak: at least 10^6 engine-style operations on the SWA or the Mamba
// pair at the peer's geometry, on Kokkos' default execution space (the GPU of a CUDA
// build), with invariants, stamped data, memory and idle counters checked.
#include "mamba_model.hpp"
#include "options.hpp"
#include "report.hpp"
#include "soak_driver.hpp"
#include "swa_model.hpp"

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
    using namespace kvpool::soak;
    Kokkos::ScopeGuard kokkos(argc, argv);
    SoakOptions options;
    try {
        options = parse_options(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const UsageError& e) {
        std::fprintf(stderr, "kvpool-soak: %s\n%s", e.what(), help_text().c_str());
        return 2;
    }
    if (options.help) {
        std::fputs(help_text().c_str(), stdout);
        return 0;
    }
    std::printf("kvpool-soak: seed %llu\n", static_cast<unsigned long long>(options.seed));
    std::fflush(stdout);
    SoakResult result;
    try {
        using Space = Kokkos::DefaultExecutionSpace;
        result = options.pair == "swa" ? SoakDriver<Space, SwaModel<Space>>(options).run()
                                       : SoakDriver<Space, MambaModel<Space>>(options).run();
    } catch (const std::exception& e) {
        result.options = options;
        result.pair = options.pair;
        result.failures.push_back(std::string("set-up: ") + e.what());
    }
    std::fputs(summary(result).c_str(), stdout);
    std::puts(json_line(result).c_str());
    return result.passed() ? 0 : 1;
}
