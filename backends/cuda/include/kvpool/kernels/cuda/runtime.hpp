// The CUDA runtime as kvpool uses it: the traits the native kernels, stream
// events, event tokens and staging are written against (stream and event
// types, launch check, events, stream waits, stream-ordered memory and
// copies), and the check every runtime call goes through: a failure throws
// kvpool::Error(ErrorCode::device) with the runtime's message. No Kokkos, so
// that the native source compiles without it.
#pragma once

#include <kvpool/device_faults.hpp>
#include <kvpool/error.hpp>
#include <kvpool/kernels/native_kernels.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace kvpool::kernels::cuda {

inline void check(cudaError_t status, const char* call) {
    if (status == cudaSuccess)
        return;
    // Reported here, so cleared: a later launch check must not report it again.
    (void)cudaGetLastError();
    throw Error(ErrorCode::device, std::string("kvpool: ") + call +
                                       " failed: " + cudaGetErrorName(status) + ": " +
                                       cudaGetErrorString(status));
}

struct Runtime {
    using stream_type = cudaStream_t;
    using event_type = cudaEvent_t;
    // What kvpool_backend() reports.
    static constexpr const char* name = "cuda";

    // The calling thread's current device; 0 where the runtime cannot tell.
    static int current_device() noexcept {
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess)
            device = 0;
        return device;
    }

    // An injected launch fault (device_faults.hpp), as the runtime reports a refused launch.
    static void fail_launch(const char* kernel) { check(cudaErrorLaunchOutOfResources, kernel); }
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
    // Later work on stream waits for the event, on the GPU.
    static void stream_wait_event(stream_type stream, event_type event) {
        check(cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent");
    }

    // Whether caller memory can be handed to the device's kernels: device or
    // managed memory, page-locked host memory, or any host memory where the
    // device reads pageable memory itself (HMM, ATS). A kernel that writes to
    // memory it cannot reach poisons the whole context, so the C API asks first.
    static bool device_can_access(const void* data) {
        cudaPointerAttributes attributes{};
        check(cudaPointerGetAttributes(&attributes, data), "cudaPointerGetAttributes");
        if (attributes.type != cudaMemoryTypeUnregistered)
            return true;
        int device = 0;
        int pageable = 0;
        check(cudaGetDevice(&device), "cudaGetDevice");
        check(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device),
              "cudaDeviceGetAttribute");
        return pageable != 0;
    }
    // Whether the host can read caller memory: all but device-only memory.
    static bool host_can_access(const void* data) {
        cudaPointerAttributes attributes{};
        check(cudaPointerGetAttributes(&attributes, data), "cudaPointerGetAttributes");
        return attributes.type != cudaMemoryTypeDevice;
    }

    // Stream-ordered device memory: usable by work enqueued on stream after
    // the call, released after the work enqueued before the free.
    static void* malloc_async(std::size_t bytes, stream_type stream) {
        void* data = nullptr;
        check(detail::device_fault_due(DeviceOp::allocation)
                  ? cudaErrorMemoryAllocation
                  : cudaMallocAsync(&data, bytes, stream),
              "cudaMallocAsync");
        return data;
    }
    static void free_async(void* data, stream_type stream) {
        check(cudaFreeAsync(data, stream), "cudaFreeAsync");
    }
    // For destructors, which cannot report a failure: the memory is released either way.
    static void free(void* data) noexcept { (void)cudaFree(data); }
    // host_src must be page-locked for the copy to be asynchronous.
    static void copy_to_device_async(void* device_dst, const void* host_src, std::size_t bytes,
                                     stream_type stream) {
        check(detail::device_fault_due(DeviceOp::upload)
                  ? cudaErrorInvalidValue
                  : cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync (host to device)");
    }
};

} // namespace kvpool::kernels::cuda

namespace kvpool::kernels {
// Defined in backends/cuda/src/cuda_kernels.cu.
extern template struct NativeKernels<cuda::Runtime>;
} // namespace kvpool::kernels
