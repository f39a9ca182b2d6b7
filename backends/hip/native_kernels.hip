#include "native_kernels.hpp"

#include <kvpool/error.hpp>

#include <algorithm>
#include <string>

namespace kvpool::hip {

namespace {
using gpu_stream_t = hipStream_t;
using gpu_error_t = hipError_t;
constexpr gpu_error_t gpu_success = hipSuccess;
gpu_error_t gpu_get_last_error() { return hipGetLastError(); }
const char* gpu_error_string(gpu_error_t err) { return hipGetErrorString(err); }
__device__ __forceinline__ uint4 stream_load(const uint4* p) { return __builtin_nontemporal_load(p); }
__device__ __forceinline__ void stream_store(uint4* p, uint4 v) { __builtin_nontemporal_store(v, p); }
}  // namespace

#include "../gpu/native_kernels.inl"

}  // namespace kvpool::hip
