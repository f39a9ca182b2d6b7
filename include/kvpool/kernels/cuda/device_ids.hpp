// DeviceIds and async_upload on CUDA: stream-ordered cudaMallocAsync and
// cudaMemcpyAsync on the instance's stream (Kokkos 3.4 writes a device View's
// allocation header with a blocking copy, and its deep_copy with an instance
// blocks for some pairs of memory spaces).
#pragma once

#include <kvpool/kernels/cuda/runtime.hpp>
#include <kvpool/kernels/device_ids.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <cstddef>

namespace kvpool::kernels {

template <> class DeviceIds<Kokkos::Cuda> {
public:
    using view_type =
        Kokkos::View<index_t*, Kokkos::CudaSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    DeviceIds() = default;
    DeviceIds(const DeviceIds&) = delete;
    DeviceIds& operator=(const DeviceIds&) = delete;
    // A destructor cannot report a failure; the memory is released either way.
    ~DeviceIds() {
        if (data_ != nullptr)
            (void)cudaFree(data_);
    }
    // The old buffer is freed in stream order, after the work that reads it.
    void reserve(const Kokkos::Cuda& space, std::size_t n) {
        if (n <= size_)
            return;
        if (data_ != nullptr)
            cuda::check(cudaFreeAsync(data_, space.cuda_stream()), "cudaFreeAsync");
        data_ = nullptr;
        size_ = 0;
        cuda::check(cudaMallocAsync(reinterpret_cast<void**>(&data_), n * sizeof(index_t),
                                    space.cuda_stream()),
                    "cudaMallocAsync (staging ids)");
        size_ = n;
    }
    view_type view() const { return view_type(data_, size_); }

private:
    index_t* data_ = nullptr;
    std::size_t size_ = 0;
};

// host_src must be page-locked for the copy to be asynchronous.
inline void async_upload(const Kokkos::Cuda& space, index_t* device_dst, const index_t* host_src,
                         std::size_t n) {
    cuda::check(cudaMemcpyAsync(device_dst, host_src, n * sizeof(index_t), cudaMemcpyHostToDevice,
                                space.cuda_stream()),
                "cudaMemcpyAsync (staging ids)");
}

} // namespace kvpool::kernels
