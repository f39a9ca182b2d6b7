// The native kernels compiled for CUDA (nvcc, through nvcc_wrapper).
#include <kvpool/kernels/cuda/runtime.hpp>

#include "native_kernels_impl.hpp"

namespace kvpool::kernels {

namespace native_detail {
template <> struct StreamingAccess<cuda::Runtime> {
    __device__ __forceinline__ static uint4 load(const uint4* p) { return __ldcs(p); }
    __device__ __forceinline__ static void store(uint4* p, uint4 v) { __stcs(p, v); }
};
} // namespace native_detail

template struct NativeKernels<cuda::Runtime>;

} // namespace kvpool::kernels
