// The HIP runtime as kvpool uses it (the traits of cuda/runtime.hpp, for HIP).
// No Kokkos, so that the native source compiles without it.
#pragma once

#include <kvpool/device_faults.hpp>
#include <kvpool/error.hpp>
#include <kvpool/kernels/native_kernels.hpp>

#include <hip/hip_runtime.h>

#include <cstddef>
#include <string>

namespace kvpool::kernels::hip {

inline void check(hipError_t status, const char* call) {
    if (status == hipSuccess)
        return;
    // Reported here, so cleared: a later launch check must not report it again.
    (void)hipGetLastError();
    throw Error(ErrorCode::device, std::string("kvpool: ") + call + " failed: " +
                                       hipGetErrorName(status) + ": " + hipGetErrorString(status));
}

struct Runtime {
    using stream_type = hipStream_t;
    using event_type = hipEvent_t;
    // What kvpool_backend() reports.
    static constexpr const char* name = "hip";

    // The calling thread's current device; 0 where the runtime cannot tell.
    static int current_device() noexcept {
        int device = 0;
        if (hipGetDevice(&device) != hipSuccess)
            device = 0;
        return device;
    }

    // An injected launch fault (device_faults.hpp), as the runtime reports a refused launch.
    static void fail_launch(const char* kernel) { check(hipErrorLaunchOutOfResources, kernel); }
    // After a kernel launch: the launch error, if any.
    static void check_launch(const char* kernel) { check(hipGetLastError(), kernel); }

    static void create_event(event_type& event) {
        check(hipEventCreateWithFlags(&event, hipEventDisableTiming), "hipEventCreateWithFlags");
    }
    // For destructors, which cannot report a failure: the event is gone either way.
    static void destroy_event(event_type event) noexcept { (void)hipEventDestroy(event); }
    static void record_event(event_type event, stream_type stream) {
        check(hipEventRecord(event, stream), "hipEventRecord");
    }
    // True when the event has completed, false while it is pending.
    static bool event_complete(event_type event) {
        const hipError_t status = hipEventQuery(event);
        if (status == hipErrorNotReady)
            return false;
        check(status, "hipEventQuery");
        return true;
    }
    static void synchronize_event(event_type event) {
        check(hipEventSynchronize(event), "hipEventSynchronize");
    }
    // Later work on stream waits for the event, on the GPU.
    static void stream_wait_event(stream_type stream, event_type event) {
        check(hipStreamWaitEvent(stream, event, 0), "hipStreamWaitEvent");
    }

    // Whether caller memory can be handed to the device's kernels: device or
    // managed memory, page-locked host memory, or any host memory where the
    // device reads pageable memory itself. A kernel that writes to memory it
    // cannot reach poisons the whole context, so the C API asks first.
    static bool device_can_access(const void* data) {
        if (registered_type(data) != unregistered)
            return true;
        int device = 0;
        int pageable = 0;
        check(hipGetDevice(&device), "hipGetDevice");
        check(hipDeviceGetAttribute(&pageable, hipDeviceAttributePageableMemoryAccess, device),
              "hipDeviceGetAttribute");
        return pageable != 0;
    }
    // Whether the host can read caller memory: all but device-only memory.
    static bool host_can_access(const void* data) {
        return registered_type(data) != static_cast<int>(hipMemoryTypeDevice);
    }

    // Stream-ordered device memory: usable by work enqueued on stream after
    // the call, released after the work enqueued before the free.
    static void* malloc_async(std::size_t bytes, stream_type stream) {
        void* data = nullptr;
        check(detail::device_fault_due(DeviceOp::allocation) ? hipErrorOutOfMemory
                                                             : hipMallocAsync(&data, bytes, stream),
              "hipMallocAsync");
        return data;
    }
    static void free_async(void* data, stream_type stream) {
        check(hipFreeAsync(data, stream), "hipFreeAsync");
    }
    // For destructors, which cannot report a failure: the memory is released either way.
    static void free(void* data) noexcept { (void)hipFree(data); }
    // host_src must be page-locked for the copy to be asynchronous.
    static void copy_to_device_async(void* device_dst, const void* host_src, std::size_t bytes,
                                     stream_type stream) {
        check(detail::device_fault_due(DeviceOp::upload)
                  ? hipErrorInvalidValue
                  : hipMemcpyAsync(device_dst, host_src, bytes, hipMemcpyHostToDevice, stream),
              "hipMemcpyAsync (host to device)");
    }

private:
    static constexpr int unregistered = -1;
    // The hipMemoryType of memory HIP knows, else unregistered: ROCm 5 refuses
    // plain host memory with hipErrorInvalidValue, ROCm 6 reports it by type.
    static int registered_type(const void* data) {
        hipPointerAttribute_t attributes{};
        const hipError_t status = hipPointerGetAttributes(&attributes, data);
        if (status == hipErrorInvalidValue) {
            (void)hipGetLastError();
            return unregistered;
        }
        check(status, "hipPointerGetAttributes");
#if HIP_VERSION_MAJOR >= 6
        if (attributes.type == hipMemoryTypeUnregistered)
            return unregistered;
        return static_cast<int>(attributes.type);
#else
        return static_cast<int>(attributes.memoryType);
#endif
    }
};

} // namespace kvpool::kernels::hip

namespace kvpool::kernels {
// Defined in backends/hip/src/hip_kernels.hip.
extern template struct NativeKernels<hip::Runtime>;
} // namespace kvpool::kernels
