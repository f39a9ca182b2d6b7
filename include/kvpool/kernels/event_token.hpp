// The completion token of a GPU backend (the engine's forward-done event, over
// a vendor's runtime traits: cuda::Runtime, hip::Runtime) and the stream wait
// a token becomes. No Kokkos, so that the HIP check build compiles it without
// a Kokkos for HIP; stream_wait.hpp maps an execution space onto it.
#pragma once

#include <kvpool/completion_token.hpp>

#include <thread>

namespace kvpool::kernels {

// Wraps an event the engine records after its forward pass; the engine keeps
// owning it and must not destroy it while the token is in use.
template <class Runtime> class EventToken final : public CompletionToken {
public:
    using event_type = typename Runtime::event_type;
    explicit EventToken(event_type event) : event_(event) {}
    bool is_complete() const override { return Runtime::event_complete(event_); }
    event_type event() const { return event_; }

private:
    event_type event_;
};

// Whether a stream can wait for the token on the GPU: an event of this runtime.
template <class Runtime> bool is_event_token(const CompletionToken& token) {
    return dynamic_cast<const EventToken<Runtime>*>(&token) != nullptr;
}

// Later work on stream waits for the token on the GPU, without blocking the
// host. A token that is not an event (a host-side marker) can only be waited
// for on the host.
template <class Runtime>
void enqueue_wait_on_stream(typename Runtime::stream_type stream, const CompletionToken& token) {
    if (const auto* event = dynamic_cast<const EventToken<Runtime>*>(&token))
        Runtime::stream_wait_event(stream, event->event());
    else
        while (!token.is_complete())
            std::this_thread::yield();
}

} // namespace kvpool::kernels
