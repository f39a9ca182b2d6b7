// The completion token of the CUDA backend: an event the engine records after
// its forward pass (kernels/event_token.hpp); waits on it become
// cudaStreamWaitEvent.
#pragma once

#include <kvpool/kernels/cuda/runtime.hpp>
#include <kvpool/kernels/event_token.hpp>

namespace kvpool {

using CudaEventToken = kernels::EventToken<kernels::cuda::Runtime>;

} // namespace kvpool
