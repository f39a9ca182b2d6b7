// Makes later work on an execution-space instance wait for a completion token.
// Host backends finish their work before returning, so there is nothing to
// enqueue; on CUDA an event token becomes a stream wait (no host block).
#pragma once

#include <kvpool/completion_token.hpp>
#include <kvpool/cuda_event_token.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <thread>

namespace kvpool {

template <class ExecutionSpace>
void enqueue_wait(const ExecutionSpace&, const CompletionToken&) {}

#if defined(KOKKOS_ENABLE_CUDA)
// A token that is not an event (a host-side marker) can only be waited for on
// the host.
inline void enqueue_wait(const Kokkos::Cuda& space, const CompletionToken& token) {
    if (const auto* cuda = dynamic_cast<const CudaEventToken*>(&token))
        cudaStreamWaitEvent(space.cuda_stream(), cuda->event(), 0);
    else
        while (!token.is_complete()) std::this_thread::yield();
}
#endif

}  // namespace kvpool
