// Host-to-device copy of n ids, ordered on an execution-space instance and
// never blocking the host. Kokkos 3.4's deep_copy with an instance blocks for
// some pairs of memory spaces, so CUDA gets cudaMemcpyAsync on the instance's
// stream; the source must be page-locked for that to be asynchronous.
#pragma once

#include <kvpool/kokkos_compat.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace kvpool::detail {

template <class ExecutionSpace>
void async_upload(const ExecutionSpace& space, index_t* device_dst, const index_t* host_src, std::size_t n) {
    using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
    Kokkos::View<index_t*, typename ExecutionSpace::memory_space, Unmanaged> dst(device_dst, n);
    Kokkos::View<const index_t*, Kokkos::HostSpace, Unmanaged> src(host_src, n);
    Kokkos::deep_copy(space, dst, src);
}

#if defined(KOKKOS_ENABLE_CUDA)
inline void async_upload(const Kokkos::Cuda& space, index_t* device_dst, const index_t* host_src, std::size_t n) {
    cudaMemcpyAsync(device_dst, host_src, n * sizeof(index_t), cudaMemcpyHostToDevice, space.cuda_stream());
}
#endif

}  // namespace kvpool::detail
