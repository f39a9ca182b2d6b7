// Kokkos::Cuda launches the native CUDA kernels on the instance's stream.
// CudaEventToken comes with it, for whoever makes tokens from engine events.
#pragma once

#include <kvpool/kernels/cuda/event_token.hpp>
#include <kvpool/kernels/cuda/runtime.hpp>
#include <kvpool/kernels/native_backend.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels {

template <> struct NativeBackend<Kokkos::Cuda> {
    static constexpr bool available = true;
    using runtime = cuda::Runtime;
    using tuning = Tuning<runtime>;
    static cudaStream_t stream(const Kokkos::Cuda& space) { return space.cuda_stream(); }
};

} // namespace kvpool::kernels
