// "Has the work enqueued so far on this instance finished?" without a fence.
// Host backends finish their kernels before returning, so there is nothing to
// track; the GPU backends specialise it with a stream event (cuda/, hip/).
#pragma once

#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels {

template <class ExecutionSpace>
class StreamEvent {
public:
    void record(const ExecutionSpace&) {}
    bool is_complete() const { return true; }
    void wait() {}
};

}  // namespace kvpool::kernels

#if defined(KOKKOS_ENABLE_CUDA)
#include <kvpool/kernels/cuda/stream_event.hpp>
#endif
#if defined(KOKKOS_ENABLE_HIP)
#include <kvpool/kernels/hip/stream_event.hpp>
#endif
