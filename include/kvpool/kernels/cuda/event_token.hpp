// The completion token of the CUDA backend (the engine's forward-done event)
// and the stream wait it becomes: later work on the instance waits for the
// event on the GPU, without blocking the host.
#pragma once

#include <kvpool/completion_token.hpp>
#include <kvpool/kernels/cuda/runtime.hpp>
#include <kvpool/kernels/stream_wait.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <thread>

namespace kvpool {

// Wraps an event the engine records after its forward pass; the engine keeps
// owning it and must not destroy it while the token is in use.
class CudaEventToken final : public CompletionToken {
public:
    explicit CudaEventToken(cudaEvent_t event) : event_(event) {}
    bool is_complete() const override { return kernels::cuda::Runtime::event_complete(event_); }
    cudaEvent_t event() const { return event_; }

private:
    cudaEvent_t event_;
};

namespace kernels {

// A token that is not an event (a host-side marker) can only be waited for on
// the host.
inline void enqueue_wait(const Kokkos::Cuda& space, const CompletionToken& token) {
    if (const auto* event = dynamic_cast<const CudaEventToken*>(&token))
        cuda::check(cudaStreamWaitEvent(space.cuda_stream(), event->event(), 0),
                    "cudaStreamWaitEvent");
    else
        while (!token.is_complete())
            std::this_thread::yield();
}

} // namespace kernels
} // namespace kvpool
