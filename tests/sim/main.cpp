// Catch2 main of the simulator tests: owns Kokkos' lifetime.
#include <Kokkos_Core.hpp>
#include <catch2/catch_session.hpp>

#include <cstdlib>

int main(int argc, char* argv[]) {
    // As kvpool-sim does: one host thread unless told otherwise (the kernels
    // are tiny, and extra threads stall on a shared machine), no binding warning.
    setenv("KOKKOS_NUM_THREADS", "1", 0);
    setenv("OMP_PROC_BIND", "false", 0);
    Kokkos::ScopeGuard kokkos(argc, argv);
    return Catch::Session().run(argc, argv);
}
