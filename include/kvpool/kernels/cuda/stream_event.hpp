// StreamEvent on CUDA: an event recorded on the instance's stream.
#pragma once

#include <kvpool/kernels/cuda/runtime.hpp>
#include <kvpool/kernels/stream_event.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels {

template <>
class StreamEvent<Kokkos::Cuda> {
public:
    StreamEvent() {
        cuda::check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming),
                    "cudaEventCreateWithFlags");
    }
    // A destructor cannot report a failure; the event is gone either way.
    ~StreamEvent() { (void)cudaEventDestroy(event_); }
    StreamEvent(const StreamEvent&) = delete;
    StreamEvent& operator=(const StreamEvent&) = delete;

    void record(const Kokkos::Cuda& space) {
        cuda::check(cudaEventRecord(event_, space.cuda_stream()), "cudaEventRecord");
        recorded_ = true;
    }
    bool is_complete() const { return !recorded_ || cuda::event_complete(event_); }
    // Blocks only if the GPU has not yet reached the recorded point.
    void wait() {
        if (recorded_) cuda::check(cudaEventSynchronize(event_), "cudaEventSynchronize");
    }

private:
    cudaEvent_t event_{};
    bool recorded_ = false;
};

}  // namespace kvpool::kernels
