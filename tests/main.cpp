// Catch2 main that owns Kokkos' lifetime and the randomised tests' knobs.
#include "test_config.hpp"

#include <Kokkos_Core.hpp>
#include <catch2/catch_session.hpp>

#include <cstdlib>

namespace kvpool::test {
RandomisedTestConfig& randomised_config() {
    static RandomisedTestConfig config;
    return config;
}
} // namespace kvpool::test

int main(int argc, char* argv[]) {
    // Without OMP_PROC_BIND, Kokkos' OpenMP backend prints a warning on stdout,
    // which ctest's test discovery would read as test names. Thread binding
    // does not matter to the tests; a value the caller set is kept.
    setenv("OMP_PROC_BIND", "false", 0);
    Kokkos::ScopeGuard kokkos(argc, argv);
    Catch::Session session;
    auto& config = kvpool::test::randomised_config();
    using Catch::Clara::Opt;
    session.cli(
        session.cli() |
        Opt(config.seed, "seed")["--kvpool-seed"](
            "run the randomised tests with this one seed (reproduces a failure)") |
        Opt(config.seeds, "count")["--kvpool-seeds"]("seeds per randomised test") |
        Opt(config.ops, "count")["--kvpool-ops"]("operations per seed") |
        Opt(config.fuzz_dir, "dir")["--kvpool-fuzz-dir"](
            "the fuzz corpus and regressions (default: $KVPOOL_FUZZ_DIR, else the source tree's)"));
    if (const int rc = session.applyCommandLine(argc, argv); rc != 0)
        return rc;
    if (config.fuzz_dir.empty()) {
        const char* from_environment = std::getenv("KVPOOL_FUZZ_DIR");
        config.fuzz_dir = from_environment != nullptr && *from_environment != '\0'
                              ? from_environment
                              : KVPOOL_FUZZ_DIR;
    }
    return session.run();
}
