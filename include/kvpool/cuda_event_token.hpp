// The completion token of the CUDA backend: the engine's forward-done event.
#pragma once

#include <kvpool/completion_token.hpp>

#if defined(KOKKOS_ENABLE_CUDA)

#include <cuda_runtime.h>

namespace kvpool {

// Wraps an event the engine records after its forward pass; the engine keeps
// owning it and must not destroy it while the token is in use.
class CudaEventToken final : public CompletionToken {
public:
    explicit CudaEventToken(cudaEvent_t event) : event_(event) {}
    bool is_complete() const override { return cudaEventQuery(event_) == cudaSuccess; }
    cudaEvent_t event() const { return event_; }

private:
    cudaEvent_t event_;
};

}  // namespace kvpool

#endif
