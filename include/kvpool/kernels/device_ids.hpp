// Device memory for staged ids, and the host-to-device copy into it, both
// ordered on an execution-space instance. Here through Kokkos; CUDA
// specialises both so that neither blocks the host (cuda/device_ids.hpp).
#pragma once

#include <kvpool/kokkos_compat.hpp>

#include <cstddef>

namespace kvpool::kernels {

template <class ExecutionSpace> class DeviceIds {
public:
    using view_type = Kokkos::View<index_t*, typename ExecutionSpace::memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    void reserve(const ExecutionSpace&, std::size_t n) {
        if (n > owned_.extent(0))
            owned_ =
                kk::uninitialized<Kokkos::View<index_t*, typename ExecutionSpace::memory_space>>(
                    "kvpool::staging_device", n);
    }
    view_type view() const { return view_type(owned_.data(), owned_.extent(0)); }

private:
    Kokkos::View<index_t*, typename ExecutionSpace::memory_space> owned_;
};

template <class ExecutionSpace>
void async_upload(const ExecutionSpace& space, index_t* device_dst, const index_t* host_src,
                  std::size_t n) {
    using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
    Kokkos::View<index_t*, typename ExecutionSpace::memory_space, Unmanaged> dst(device_dst, n);
    Kokkos::View<const index_t*, Kokkos::HostSpace, Unmanaged> src(host_src, n);
    Kokkos::deep_copy(space, dst, src);
}

} // namespace kvpool::kernels

#if defined(KOKKOS_ENABLE_CUDA)
#include <kvpool/kernels/cuda/device_ids.hpp>
#endif
