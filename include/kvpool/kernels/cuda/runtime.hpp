// The CUDA runtime as kvpool uses it: the traits the native kernels and the
// stream events are written against (stream and event types, launch check,
// events), and the check every runtime call goes through: a failure throws
// kvpool::Error(ErrorCode::device) with the runtime's message. No Kokkos, so
// that the native source compiles without it.
#pragma once

#include <kvpool/error.hpp>
#include <kvpool/kernels/native_kernels.hpp>

#include <cuda_runtime.h>

#include <string>

namespace kvpool::kernels::cuda {

inline void check(cudaError_t status, const char* call) {
    if (status != cudaSuccess)
        throw Error(ErrorCode::device, std::string("kvpool: ") + call +
                                           " failed: " + cudaGetErrorName(status) + ": " +
                                           cudaGetErrorString(status));
}

struct Runtime {
    using stream_type = cudaStream_t;
    using event_type = cudaEvent_t;

    // After a kernel launch: the launch error, if any.
    static void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

    static void create_event(event_type& event) {
        check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    // For destructors, which cannot report a failure: the event is gone either way.
    static void destroy_event(event_type event) noexcept { (void)cudaEventDestroy(event); }
    static void record_event(event_type event, stream_type stream) {
        check(cudaEventRecord(event, stream), "cudaEventRecord");
    }
    // True when the event has completed, false while it is pending.
    static bool event_complete(event_type event) {
        const cudaError_t status = cudaEventQuery(event);
        if (status == cudaErrorNotReady)
            return false;
        check(status, "cudaEventQuery");
        return true;
    }
    static void synchronize_event(event_type event) {
        check(cudaEventSynchronize(event), "cudaEventSynchronize");
    }
};

} // namespace kvpool::kernels::cuda

namespace kvpool::kernels {
// Defined in src/native/cuda_kernels.cu.
extern template struct NativeKernels<cuda::Runtime>;
} // namespace kvpool::kernels
