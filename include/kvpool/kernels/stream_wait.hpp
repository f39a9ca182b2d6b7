// Makes later work on an execution-space instance wait for a completion token.
// Host backends finish their work before returning, so there is nothing to
// enqueue; on a GPU backend an event token becomes a stream wait on the
// instance's stream (event_token.hpp), through the vendor's runtime traits.
#pragma once

#include <kvpool/completion_token.hpp>
#include <kvpool/kernels/event_token.hpp>
#include <kvpool/kernels/native_backend.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels {

template <class ExecutionSpace>
void enqueue_wait([[maybe_unused]] const ExecutionSpace& space,
                  [[maybe_unused]] const CompletionToken& token) {
    using backend = NativeBackend<ExecutionSpace>;
    if constexpr (backend::available)
        enqueue_wait_on_stream<typename backend::runtime>(backend::stream(space), token);
}

// Whether enqueue_wait orders later work on the instance after the token
// without blocking the host: only an event token of the instance's GPU runtime.
template <class ExecutionSpace>
bool orders_on_stream([[maybe_unused]] const CompletionToken& token) {
    using backend = NativeBackend<ExecutionSpace>;
    if constexpr (backend::available)
        return is_event_token<typename backend::runtime>(token);
    else
        return false;
}

} // namespace kvpool::kernels
