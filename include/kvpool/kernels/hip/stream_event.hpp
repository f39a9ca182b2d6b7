// StreamEvent on HIP: an event recorded on the instance's stream.
#pragma once

#include <kvpool/kernels/hip/runtime.hpp>
#include <kvpool/kernels/stream_event.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels {

template <>
class StreamEvent<kk::HIP> {
public:
    StreamEvent() {
        hip::check(hipEventCreateWithFlags(&event_, hipEventDisableTiming), "hipEventCreateWithFlags");
    }
    // A destructor cannot report a failure; the event is gone either way.
    ~StreamEvent() { (void)hipEventDestroy(event_); }
    StreamEvent(const StreamEvent&) = delete;
    StreamEvent& operator=(const StreamEvent&) = delete;

    void record(const kk::HIP& space) {
        hip::check(hipEventRecord(event_, space.hip_stream()), "hipEventRecord");
        recorded_ = true;
    }
    bool is_complete() const { return !recorded_ || hip::event_complete(event_); }
    // Blocks only if the GPU has not yet reached the recorded point.
    void wait() {
        if (recorded_) hip::check(hipEventSynchronize(event_), "hipEventSynchronize");
    }

private:
    hipEvent_t event_{};
    bool recorded_ = false;
};

}  // namespace kvpool::kernels
