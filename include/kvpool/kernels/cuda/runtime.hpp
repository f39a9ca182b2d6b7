// The CUDA runtime as kvpool uses it: the stream type of the native kernels,
// and the check every runtime call goes through (a failure throws
// kvpool::Error(ErrorCode::device) with the runtime's message). No Kokkos, so
// that the native source compiles without it.
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/kernels/native_kernels.hpp>

#include <cuda_runtime.h>

#include <string>

namespace kvpool::kernels::cuda {

inline void check(cudaError_t status, const char* call) {
    if (status != cudaSuccess)
        throw Error(ErrorCode::device, std::string("kvpool: ") + call + " failed: " +
                                           cudaGetErrorName(status) + ": " +
                                           cudaGetErrorString(status));
}

// cudaEventQuery: true when the event has completed, false while pending.
inline bool event_complete(cudaEvent_t event) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) return false;
    check(status, "cudaEventQuery");
    return true;
}

struct Runtime {
    using stream_type = cudaStream_t;
    // After a kernel launch: the launch error, if any.
    static void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }
};

}  // namespace kvpool::kernels::cuda

namespace kvpool::kernels {
// Defined in src/native/cuda_kernels.cu.
extern template struct NativeKernels<cuda::Runtime>;
}  // namespace kvpool::kernels
