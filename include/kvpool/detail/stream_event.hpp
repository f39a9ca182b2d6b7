// "Has the work enqueued so far on this instance finished?" without a fence.
// Host backends finish their kernels before returning, so there is nothing to
// track; the GPU backends use a stream event.
#pragma once

#include <kvpool/kokkos_compat.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif
#if defined(KOKKOS_ENABLE_HIP)
#include <hip/hip_runtime.h>
#endif

namespace kvpool::detail {

template <class ExecutionSpace>
class StreamEvent {
public:
    void record(const ExecutionSpace&) {}
    bool is_complete() const { return true; }
    void wait() {}
};

#if defined(KOKKOS_ENABLE_CUDA)
template <>
class StreamEvent<Kokkos::Cuda> {
public:
    StreamEvent() { cudaEventCreateWithFlags(&event_, cudaEventDisableTiming); }
    ~StreamEvent() { cudaEventDestroy(event_); }
    StreamEvent(const StreamEvent&) = delete;
    StreamEvent& operator=(const StreamEvent&) = delete;
    void record(const Kokkos::Cuda& space) {
        cudaEventRecord(event_, space.cuda_stream());
        recorded_ = true;
    }
    bool is_complete() const { return !recorded_ || cudaEventQuery(event_) == cudaSuccess; }
    // Blocks only if the GPU has not yet reached the recorded point.
    void wait() {
        if (recorded_) cudaEventSynchronize(event_);
    }

private:
    cudaEvent_t event_{};
    bool recorded_ = false;
};
#endif

#if defined(KOKKOS_ENABLE_HIP)
template <>
class StreamEvent<kk::HIP> {
public:
    StreamEvent() { (void)hipEventCreateWithFlags(&event_, hipEventDisableTiming); }
    ~StreamEvent() { (void)hipEventDestroy(event_); }
    StreamEvent(const StreamEvent&) = delete;
    StreamEvent& operator=(const StreamEvent&) = delete;
    void record(const kk::HIP& space) {
        (void)hipEventRecord(event_, space.hip_stream());
        recorded_ = true;
    }
    bool is_complete() const { return !recorded_ || hipEventQuery(event_) == hipSuccess; }
    void wait() {
        if (recorded_) (void)hipEventSynchronize(event_);
    }

private:
    hipEvent_t event_{};
    bool recorded_ = false;
};
#endif

}  // namespace kvpool::detail
