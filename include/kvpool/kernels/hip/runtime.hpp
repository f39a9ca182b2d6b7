// The HIP runtime as kvpool uses it (see cuda/runtime.hpp). No Kokkos, so that
// the native source compiles without it.
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/kernels/native_kernels.hpp>

#include <hip/hip_runtime.h>

#include <string>

namespace kvpool::kernels::hip {

inline void check(hipError_t status, const char* call) {
    if (status != hipSuccess)
        throw Error(ErrorCode::device, std::string("kvpool: ") + call + " failed: " +
                                           hipGetErrorName(status) + ": " +
                                           hipGetErrorString(status));
}

// hipEventQuery: true when the event has completed, false while pending.
inline bool event_complete(hipEvent_t event) {
    const hipError_t status = hipEventQuery(event);
    if (status == hipErrorNotReady) return false;
    check(status, "hipEventQuery");
    return true;
}

struct Runtime {
    using stream_type = hipStream_t;
    // After a kernel launch: the launch error, if any.
    static void check_launch(const char* kernel) { check(hipGetLastError(), kernel); }
};

}  // namespace kvpool::kernels::hip

namespace kvpool::kernels {
// Defined in src/native/hip_kernels.hip.
extern template struct NativeKernels<hip::Runtime>;
}  // namespace kvpool::kernels
