// The completion token of the HIP backend: an event the engine records after
// its forward pass (kernels/event_token.hpp); waits on it become
// hipStreamWaitEvent.
#pragma once

#include <kvpool/kernels/event_token.hpp>
#include <kvpool/kernels/hip/runtime.hpp>

namespace kvpool {

using HipEventToken = kernels::EventToken<kernels::hip::Runtime>;

} // namespace kvpool
