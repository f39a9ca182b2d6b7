// What the fuzz targets share: Kokkos started once per process, and one run of
// a randomised test's Run class decoded from the fuzzer's bytes
// (tests/harness/fuzz_input.hpp). A mismatch with the reference model, a failed
// check_invariants() or data check, or an unexpected exception prints the
// run's report and aborts, which libFuzzer records as a crash.
#pragma once

#include "fuzz_input.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

namespace kvpool::fuzz {

inline void start_kokkos() {
    Kokkos::initialize();
    std::atexit([] { Kokkos::finalize(); });
}

template <class Run, class Config>
void run_input(const std::vector<Config>& configs, const std::uint8_t* data, std::size_t size) {
    try {
        if (auto run = test::run_from_input<Run>(configs, data, size))
            run->run();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kvpool fuzz: %s\n", e.what());
        std::abort();
    }
}

} // namespace kvpool::fuzz

// The libFuzzer entry points of a target that runs Run over the configurations
// the expression configs gives, and its AddressSanitizer defaults (ASAN_OPTIONS
// overrides them): no fake stacks for use-after-return, no allocation stacks
// and a short quarantine, which cost more than the run itself on inputs of a
// few dozen steps; overflows, use after free and leaks are still caught (rerun
// a crash input with ASAN_OPTIONS=malloc_context_size=30 for the stacks).
#define KVPOOL_FUZZ_TARGET(Run, configs)                                                           \
    extern "C" const char* __asan_default_options() {                                              \
        return "detect_stack_use_after_return=0:malloc_context_size=0:quarantine_size_mb=16";      \
    }                                                                                              \
    extern "C" int LLVMFuzzerInitialize(int*, char***) {                                           \
        kvpool::fuzz::start_kokkos();                                                              \
        return 0;                                                                                  \
    }                                                                                              \
    extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {            \
        static const auto all = configs;                                                           \
        kvpool::fuzz::run_input<Run>(all, data, size);                                             \
        return 0;                                                                                  \
    }
