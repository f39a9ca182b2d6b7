// The native kernels compiled for HIP (hipcc).
#include <kvpool/kernels/hip/runtime.hpp>

#include "native_kernels_impl.hpp"

namespace kvpool::kernels {

namespace native_detail {
// The nontemporal builtins take clang's native vector types, not HIP's uint4.
template <> struct StreamingAccess<hip::Runtime> {
    using native_u32x4 = unsigned int __attribute__((ext_vector_type(4)));
    __device__ __forceinline__ static uint4 load(const uint4* p) {
        const native_u32x4 v = __builtin_nontemporal_load(reinterpret_cast<const native_u32x4*>(p));
        return make_uint4(v.x, v.y, v.z, v.w);
    }
    __device__ __forceinline__ static void store(uint4* p, uint4 v) {
        __builtin_nontemporal_store(native_u32x4{v.x, v.y, v.z, v.w},
                                    reinterpret_cast<native_u32x4*>(p));
    }
};
} // namespace native_detail

template struct NativeKernels<hip::Runtime>;

} // namespace kvpool::kernels
