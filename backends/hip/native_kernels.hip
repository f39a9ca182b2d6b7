#include "native_kernels.hpp"

#include <kvpool/error.hpp>

#include <algorithm>
#include <string>

namespace kvpool::hip {

namespace {
using gpu_error_t = hipError_t;
constexpr gpu_error_t gpu_success = hipSuccess;
gpu_error_t gpu_get_last_error() { return hipGetLastError(); }
const char* gpu_error_string(gpu_error_t err) { return hipGetErrorString(err); }
// The nontemporal builtins take clang's native vector types, not HIP's uint4.
using native_u32x4 = unsigned int __attribute__((ext_vector_type(4)));
__device__ __forceinline__ uint4 stream_load(const uint4* p) {
    const native_u32x4 v = __builtin_nontemporal_load(reinterpret_cast<const native_u32x4*>(p));
    return make_uint4(v.x, v.y, v.z, v.w);
}
__device__ __forceinline__ void stream_store(uint4* p, uint4 v) {
    __builtin_nontemporal_store(native_u32x4{v.x, v.y, v.z, v.w}, reinterpret_cast<native_u32x4*>(p));
}
}  // namespace

#include "../gpu/native_kernels.inl"

}  // namespace kvpool::hip
