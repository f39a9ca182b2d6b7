// "Has the work enqueued so far on this instance finished?" without a fence.
// Host backends finish their kernels before returning, so there is nothing to
// track; on a GPU backend it is an event recorded on the instance's stream,
// through the vendor's runtime traits (cuda::Runtime, hip::Runtime).
#pragma once

#include <kvpool/kernels/native_backend.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels {

template <class ExecutionSpace, bool Gpu = NativeBackend<ExecutionSpace>::available>
class StreamEvent {
public:
    void record(const ExecutionSpace&) {}
    bool is_complete() const { return true; }
    void wait() {}
};

template <class ExecutionSpace> class StreamEvent<ExecutionSpace, true> {
    using backend = NativeBackend<ExecutionSpace>;
    using runtime = typename backend::runtime;

public:
    StreamEvent() { runtime::create_event(event_); }
    ~StreamEvent() { runtime::destroy_event(event_); }
    StreamEvent(const StreamEvent&) = delete;
    StreamEvent& operator=(const StreamEvent&) = delete;

    void record(const ExecutionSpace& space) {
        runtime::record_event(event_, backend::stream(space));
        recorded_ = true;
    }
    bool is_complete() const { return !recorded_ || runtime::event_complete(event_); }
    // Blocks only if the GPU has not yet reached the recorded point.
    void wait() {
        if (recorded_)
            runtime::synchronize_event(event_);
    }

private:
    typename runtime::event_type event_{};
    bool recorded_ = false;
};

// Whether work enqueued on a and on b runs in one order: on a GPU backend,
// whether they share a stream; on a host backend, always.
template <class ExecutionSpace> bool same_stream(const ExecutionSpace& a, const ExecutionSpace& b) {
    using backend = NativeBackend<ExecutionSpace>;
    if constexpr (backend::available)
        return backend::stream(a) == backend::stream(b);
    else
        return true;
}

} // namespace kvpool::kernels
