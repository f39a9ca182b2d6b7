// What the soak watches for growth: the process's resident host memory, and
// on a GPU backend the device memory in use (by every process on the device,
// as cudaMemGetInfo reports it; the soak runs alone on its GPU).
#pragma once

#include <kvpool/kokkos_compat.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <kvpool/kernels/cuda/runtime.hpp>
#endif

#include <fstream>
#include <optional>

#include <unistd.h>

namespace kvpool::soak {

// Resident set size from /proc/self/statm (its second field, in pages).
inline index_t host_rss_bytes() {
    std::ifstream statm("/proc/self/statm");
    index_t size_pages = 0, resident_pages = 0;
    statm >> size_pages >> resident_pages;
    return resident_pages * static_cast<index_t>(sysconf(_SC_PAGESIZE));
}

// Device bytes in use; none on the host backends, whose memory RSS counts.
template <class ExecutionSpace> std::optional<index_t> device_bytes_in_use() {
    return std::nullopt;
}

#if defined(KOKKOS_ENABLE_CUDA)
template <> inline std::optional<index_t> device_bytes_in_use<Kokkos::Cuda>() {
    std::size_t free_bytes = 0, total_bytes = 0;
    kernels::cuda::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    return static_cast<index_t>(total_bytes - free_bytes);
}
#endif

} // namespace kvpool::soak
