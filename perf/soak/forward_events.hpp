// The engine's forward passes as the allocator sees them: a completion token
// recorded after each forward's device work. On CUDA it is a real event on the
// instance's stream (the allocator turns it into a stream wait); the host
// backends finish their work before returning, so their token is a marker the
// driver completes a step later, as an asynchronous engine would.
#pragma once

#include <kvpool/completion_token.hpp>
#include <kvpool/kokkos_compat.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <kvpool/kernels/cuda/event_token.hpp>
#endif

#include <deque>
#include <memory>

namespace kvpool::soak {

template <class ExecutionSpace> class ForwardEvents {
public:
    // A token that completes when the work queued on space so far has.
    CompletionTokenPtr record(const ExecutionSpace&) {
        in_flight_.push_back(std::make_shared<ManualToken>());
        return in_flight_.back();
    }
    // Completes every forward but the newest: the engine's previous step is done.
    void complete_older() {
        while (in_flight_.size() > 1) {
            in_flight_.front()->complete();
            in_flight_.pop_front();
        }
    }
    void complete_all(const ExecutionSpace&) {
        complete_older();
        if (!in_flight_.empty())
            in_flight_.front()->complete();
        in_flight_.clear();
    }

private:
    std::deque<std::shared_ptr<ManualToken>> in_flight_;
};

#if defined(KOKKOS_ENABLE_CUDA)
template <> class ForwardEvents<Kokkos::Cuda> {
public:
    // An event recorded on the instance's stream; the token owns it, so the
    // event lives as long as the allocator holds the token.
    CompletionTokenPtr record(const Kokkos::Cuda& space) {
        using Runtime = kernels::cuda::Runtime;
        cudaEvent_t event;
        Runtime::create_event(event);
        std::shared_ptr<CudaEventToken> token(new CudaEventToken(event), [](CudaEventToken* t) {
            Runtime::destroy_event(t->event());
            delete t;
        });
        Runtime::record_event(event, space.cuda_stream());
        return token;
    }
    // Events complete on their own, when the GPU gets there.
    void complete_older() {}
    void complete_all(const Kokkos::Cuda& space) { space.fence(); }
};
#endif

} // namespace kvpool::soak
