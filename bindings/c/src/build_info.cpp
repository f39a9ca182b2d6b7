// The C API's build queries: versions, Kokkos' backends, the GPU architectures compiled for.
#include <kvpool/c_api.h>

#include <Kokkos_Macros.hpp>

#include <sstream>
#include <string>

namespace {

std::string kokkos_version() {
    std::ostringstream out;
    out << KOKKOS_VERSION / 10000 << '.' << KOKKOS_VERSION / 100 % 100 << '.'
        << KOKKOS_VERSION % 100;
    return out.str();
}

std::string backends() {
    std::string list;
    auto add = [&list](const char* name) { list += list.empty() ? name : std::string(" ") + name; };
#if defined(KOKKOS_ENABLE_SERIAL)
    add("Serial");
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
    add("OpenMP");
#endif
#if defined(KOKKOS_ENABLE_THREADS)
    add("Threads");
#endif
#if defined(KOKKOS_ENABLE_CUDA)
    add("Cuda");
#endif
#if defined(KOKKOS_ENABLE_HIP)
    add("HIP");
#endif
    return list;
}

// CUDA: nvcc's own list of the virtual architectures of this compilation (it holds those that
// NVCC_APPEND_FLAGS adds, which Kokkos does not know of). HIP: Kokkos' architecture option.
std::string gpu_architectures() {
#if defined(KOKKOS_ENABLE_CUDA) && defined(__CUDA_ARCH_LIST__)
    std::string list;
    for (int arch : {__CUDA_ARCH_LIST__})
        list += (list.empty() ? "sm_" : " sm_") + std::to_string(arch / 10);
    return list;
#elif defined(KOKKOS_ENABLE_CUDA)
    return "unknown (nvcc before 11.5)";
#elif defined(KOKKOS_ENABLE_HIP)
#if defined(KOKKOS_ARCH_AMD_GFX942)
    return "gfx942";
#elif defined(KOKKOS_ARCH_AMD_GFX90A) || defined(KOKKOS_ARCH_VEGA90A)
    return "gfx90a";
#elif defined(KOKKOS_ARCH_AMD_GFX908) || defined(KOKKOS_ARCH_VEGA908)
    return "gfx908";
#else
    return "unknown (a Kokkos AMD architecture kvpool does not name)";
#endif
#else
    return "none";
#endif
}

std::string compiler() {
    std::string name;
#if defined(__CUDACC_VER_MAJOR__)
    name = "nvcc " + std::to_string(__CUDACC_VER_MAJOR__) + "." +
           std::to_string(__CUDACC_VER_MINOR__) + ", host ";
#endif
#if defined(__clang__)
    name += __VERSION__;
#elif defined(__GNUC__)
    name += std::string("g++ ") + __VERSION__;
#endif
    return name;
}

} // namespace

extern "C" {

int kvpool_c_api_version(void) {
    return KVPOOL_C_API_VERSION;
}

const char* kvpool_version(void) {
    return KVPOOL_VERSION_STRING;
}

const char* kvpool_build_info(void) {
    static const std::string info = "kokkos: " + kokkos_version() + "\nbackends: " + backends() +
                                    "\narch: " + gpu_architectures() + "\ncompiler: " + compiler() +
                                    "\n";
    return info.c_str();
}
}
