#include "native_kernels.hpp"

#include <kvpool/error.hpp>

#include <algorithm>
#include <string>

namespace kvpool::cuda {

namespace {
using gpu_error_t = cudaError_t;
constexpr gpu_error_t gpu_success = cudaSuccess;
gpu_error_t gpu_get_last_error() { return cudaGetLastError(); }
const char* gpu_error_string(gpu_error_t err) { return cudaGetErrorString(err); }
__device__ __forceinline__ uint4 stream_load(const uint4* p) { return __ldcs(p); }
__device__ __forceinline__ void stream_store(uint4* p, uint4 v) { __stcs(p, v); }
}  // namespace

#include "../gpu/native_kernels.inl"

}  // namespace kvpool::cuda
