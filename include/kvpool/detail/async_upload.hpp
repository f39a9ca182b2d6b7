// Device memory for staged ids, and the host-to-device copy into it, both
// ordered on an execution-space instance and never blocking the host. Kokkos
// 3.4 writes a device View's allocation header with a blocking copy, and its
// deep_copy with an instance blocks for some pairs of memory spaces, so CUDA
// gets cudaMallocAsync and cudaMemcpyAsync on the instance's stream (the
// source must be page-locked for the copy to be asynchronous).
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <string>

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

template <class ExecutionSpace>
class DeviceIds {
public:
    using view_type = Kokkos::View<index_t*, typename ExecutionSpace::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    void reserve(const ExecutionSpace&, std::size_t n) {
        if (n > owned_.extent(0))
            owned_ = kk::uninitialized<Kokkos::View<index_t*, typename ExecutionSpace::memory_space>>(
                "kvpool::staging_device", n);
    }
    view_type view() const { return view_type(owned_.data(), owned_.extent(0)); }

private:
    Kokkos::View<index_t*, typename ExecutionSpace::memory_space> owned_;
};

#if defined(KOKKOS_ENABLE_CUDA)
template <>
class DeviceIds<Kokkos::Cuda> {
public:
    using view_type = Kokkos::View<index_t*, Kokkos::CudaSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    DeviceIds() = default;
    DeviceIds(const DeviceIds&) = delete;
    DeviceIds& operator=(const DeviceIds&) = delete;
    ~DeviceIds() {
        if (data_ != nullptr) cudaFree(data_);
    }
    // The old buffer is freed in stream order, after the work that reads it.
    void reserve(const Kokkos::Cuda& space, std::size_t n) {
        if (n <= size_) return;
        if (data_ != nullptr) cudaFreeAsync(data_, space.cuda_stream());
        data_ = nullptr;
        size_ = 0;
        if (cudaMallocAsync(reinterpret_cast<void**>(&data_), n * sizeof(index_t), space.cuda_stream()) != cudaSuccess)
            throw Error(ErrorCode::internal, "kvpool staging: cudaMallocAsync of " + std::to_string(n) + " ids failed");
        size_ = n;
    }
    view_type view() const { return view_type(data_, size_); }

private:
    index_t* data_ = nullptr;
    std::size_t size_ = 0;
};

inline void async_upload(const Kokkos::Cuda& space, index_t* device_dst, const index_t* host_src, std::size_t n) {
    cudaMemcpyAsync(device_dst, host_src, n * sizeof(index_t), cudaMemcpyHostToDevice, space.cuda_stream());
}
#endif

}  // namespace kvpool::detail
