// Benchmark main: owns Kokkos and records the device and the Kokkos
// configuration in the JSON context.
#include <Kokkos_Core.hpp>
#include <benchmark/benchmark.h>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

#include <sstream>
#include <string>

namespace {

std::string device_name() {
#if defined(KOKKOS_ENABLE_CUDA)
    cudaDeviceProp props{};
    int device = 0;
    cudaGetDevice(&device);
    cudaGetDeviceProperties(&props, device);
    return props.name;
#else
    return "host";
#endif
}

std::string kokkos_configuration() {
    std::ostringstream out;
    out << "Kokkos " << KOKKOS_VERSION / 10000 << '.' << KOKKOS_VERSION / 100 % 100 << '.' << KOKKOS_VERSION % 100
        << ", default space " << Kokkos::DefaultExecutionSpace::name();
    return out.str();
}

}  // namespace

int main(int argc, char** argv) {
    Kokkos::ScopeGuard kokkos(argc, argv);
    benchmark::Initialize(&argc, argv);
    benchmark::AddCustomContext("device", device_name());
    benchmark::AddCustomContext("kokkos", kokkos_configuration());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
