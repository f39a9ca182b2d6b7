// Benchmark main: owns Kokkos and records the device, its runtime and the
// Kokkos configuration in the JSON context (benchmark names carry no vendor).
#include <Kokkos_Core.hpp>
#include <benchmark/benchmark.h>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#elif defined(KOKKOS_ENABLE_HIP)
#include <hip/hip_runtime.h>
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
#elif defined(KOKKOS_ENABLE_HIP)
    hipDeviceProp_t props{};
    int device = 0;
    (void)hipGetDevice(&device);
    (void)hipGetDeviceProperties(&props, device);
    return std::string(props.name) + " (" + props.gcnArchName + ")";
#else
    return "host";
#endif
}

// The runtime the binary was built with and the driver's API version, as the
// runtime reports them (the driver's release number is the runner's to add).
std::string gpu_runtime() {
#if defined(KOKKOS_ENABLE_CUDA)
    int runtime = 0;
    int driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    const auto version = [](int v) {
        return std::to_string(v / 1000) + '.' + std::to_string(v % 1000 / 10);
    };
    return "CUDA runtime " + version(runtime) + ", driver API " + version(driver);
#elif defined(KOKKOS_ENABLE_HIP)
    int runtime = 0;
    int driver = 0;
    (void)hipRuntimeGetVersion(&runtime);
    (void)hipDriverGetVersion(&driver);
    return "HIP runtime " + std::to_string(runtime) + ", driver " + std::to_string(driver);
#else
    return "none";
#endif
}

std::string kokkos_configuration() {
    std::ostringstream out;
    out << "Kokkos " << KOKKOS_VERSION / 10000 << '.' << KOKKOS_VERSION / 100 % 100 << '.'
        << KOKKOS_VERSION % 100 << ", default space " << Kokkos::DefaultExecutionSpace::name();
    return out.str();
}

} // namespace

int main(int argc, char** argv) {
    Kokkos::ScopeGuard kokkos(argc, argv);
    benchmark::Initialize(&argc, argv);
    benchmark::AddCustomContext("device", device_name());
    benchmark::AddCustomContext("runtime", gpu_runtime());
    benchmark::AddCustomContext("kokkos", kokkos_configuration());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
