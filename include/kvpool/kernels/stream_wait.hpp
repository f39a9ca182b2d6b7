// Makes later work on an execution-space instance wait for a completion token.
// Host backends finish their work before returning, so there is nothing to
// enqueue; on CUDA an event token becomes a stream wait (cuda/event_token.hpp).
#pragma once

#include <kvpool/completion_token.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels {

template <class ExecutionSpace> void enqueue_wait(const ExecutionSpace&, const CompletionToken&) {}

} // namespace kvpool::kernels

#if defined(KOKKOS_ENABLE_CUDA)
#include <kvpool/kernels/cuda/event_token.hpp>
#endif
