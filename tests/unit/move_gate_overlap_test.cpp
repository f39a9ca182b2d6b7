// The move gate under a real copy: a transfer copies gated pages' bytes out of
// the unified buffer into a View of its own on another execution-space
// instance while the main instance frees, flushes, allocates and stamps. On a
// GPU the copy runs on a second stream, held back by a delay kernel, and its
// completion token is an event: an eager free's compaction waits for it on the
// stream (without the wait, the move into a gated freed page would overwrite
// it before the copy reads it). On the host backends the copy runs after the
// traffic, its token completed by hand, and an eager free that would touch the
// gated pages is refused until then. Either way the copied bytes must be the
// ones stamped before the transfer began.
#include "device_delay.hpp"
#include "move_gate_support.hpp"
#include "test_support.hpp"
#include <kvpool/completion_token.hpp>
#include <kvpool/kernels/stream_wait.hpp>

#include <cstdint>
#include <memory>
#include <type_traits>

using namespace kvpool;
using namespace kvpool::test;

namespace {

using Bytes = kk::View<std::uint8_t*, Space::memory_space>;
using Ids = kk::View<index_t*, Space::memory_space>;

constexpr index_t page_size = 4;
constexpr index_t entry_bytes = 32;

// Copies the entries at the physical token ids from the buffer into out, on space.
template <class ExecutionSpace>
void copy_entries(const ExecutionSpace& space, const Bytes& buffer, const Ids& physical,
                  const Bytes& out) {
    const index_t entry = entry_bytes;
    Kokkos::parallel_for(
        kk::range(space, static_cast<index_t>(out.extent(0))),
        KOKKOS_LAMBDA(index_t i) { out(i) = buffer(physical(i / entry) * entry + i % entry); });
}

// One transfer of the pages holding tokens, on its own instance where the
// backend has streams (a CUDA build), else on the default one once finish() runs.
class Transfer {
public:
    Transfer(Pool& pool, const Allocator& side, const std::vector<index_t>& tokens)
        : pool_(pool), physical_(side.translate(Space(), to_device(tokens))),
          out_(kk::uninitialized<Bytes>("test::transfer", tokens.size() * entry_bytes)),
          sink_("test::delay", 1) {
        // The copy's stream does not follow the default instance's.
        Kokkos::fence();
        start(Space());
    }
    Transfer(const Transfer&) = delete;
    Transfer& operator=(const Transfer&) = delete;
    ~Transfer() {
#if defined(KOKKOS_ENABLE_CUDA)
        if (stream_ != nullptr) {
            (void)cudaStreamSynchronize(stream_);
            kernels::cuda::Runtime::destroy_event(event_);
            (void)cudaStreamDestroy(stream_);
        }
#endif
    }

    CompletionTokenPtr token() const { return token_; }
    // Whether the main instance's compaction can wait for the copy on its stream.
    bool stream_ordered() const { return kernels::orders_on_stream<Space>(*token_); }

    // Runs the copy where it has not run yet, and returns its bytes once done.
    std::vector<std::uint8_t> finish() {
        if (manual_) {
            copy_entries(Space(), pool_.bytes(), physical_, out_);
            Space().fence();
            manual_->complete();
        }
        Kokkos::fence();
        const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out_);
        return {host.data(), host.data() + host.extent(0)};
    }

private:
    template <class ExecutionSpace> void start(const ExecutionSpace&) {
#if defined(KOKKOS_ENABLE_CUDA)
        if constexpr (std::is_same_v<ExecutionSpace, Kokkos::Cuda>) {
            using Runtime = kernels::cuda::Runtime;
            REQUIRE(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess);
            const Kokkos::Cuda copy_space(stream_);
            delay(copy_space, sink_);
            copy_entries(copy_space, pool_.bytes(), physical_, out_);
            Runtime::create_event(event_);
            Runtime::record_event(event_, stream_);
            token_ = std::make_shared<CudaEventToken>(event_);
            return;
        }
#endif
        manual_ = std::make_shared<ManualToken>();
        token_ = manual_;
    }

    Pool& pool_;
    Ids physical_;
    Bytes out_;
    kk::View<std::uint64_t*, Space::memory_space> sink_;
    CompletionTokenPtr token_;
    std::shared_ptr<ManualToken> manual_;
#if defined(KOKKOS_ENABLE_CUDA)
    cudaStream_t stream_ = nullptr;
    cudaEvent_t event_ = nullptr;
#endif
};

std::vector<std::uint8_t> stamped_bytes(int tag, const std::vector<index_t>& tokens) {
    std::vector<std::uint8_t> bytes;
    for (index_t t : tokens)
        for (index_t k = 0; k < entry_bytes; ++k)
            bytes.push_back(stamp_byte(tag, t, k));
    return bytes;
}

std::vector<index_t> page_tokens(const std::vector<index_t>& tokens,
                                 const std::vector<index_t>& pages) {
    std::vector<index_t> out;
    for (index_t p : pages)
        out.insert(out.end(), tokens.begin() + p * page_size, tokens.begin() + (p + 1) * page_size);
    return out;
}

std::vector<index_t> take(Pool& pool, Allocator& a, int tag, index_t pages) {
    const auto ids = a.alloc(Space(), pages * page_size);
    REQUIRE(ids);
    const auto host = to_host(*ids);
    stamp_tokens(pool, a, tag, host);
    return host;
}

} // namespace

TEST_CASE("move gate: a real copy of gated pages overlaps allocator traffic and reads the bytes "
          "stamped before it",
          "[move-gate]") {
    for (const auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
        INFO((mode == CompactionMode::eager ? "eager" : "lazy"));
        Pool pool(
            PoolLayout(64 * 1024, {spec("full", entry_bytes, page_size, GrowDirection::up),
                                   spec("swa", entry_bytes, page_size, GrowDirection::down)}));
        Allocator up(pool, "full", options(mode));
        Allocator down(pool, "swa", options(CompactionMode::lazy));
        up.bind_peer(down);
        std::vector<index_t> live = take(pool, up, 0, 16);
        std::vector<index_t> peer = take(pool, down, 1, 4);

        // The transfer sends pages 3 and 9 and the two at the frontier; the
        // engine then frees 3 and 5 (an aborted request) while it runs.
        const std::vector<index_t> sent = page_tokens(live, {3, 9, 14, 15});
        const std::vector<index_t> gone = page_tokens(live, {3, 5});
        Transfer transfer(pool, up, sent);
        up.gate_transfer(transfer.token(), sent);

        // Traffic the gate does not stop: the peer allocates and frees.
        const auto more_peer = take(pool, down, 1, 3);
        down.free(Space(), page_tokens(more_peer, {1}));
        peer.insert(peer.end(), more_peer.begin(), more_peer.begin() + page_size);
        peer.insert(peer.end(), more_peer.begin() + 2 * page_size, more_peer.end());

        if (mode == CompactionMode::eager && !transfer.stream_ordered()) {
            // The compaction would move frontier page 15 into gated page 3.
            const std::string before = up.state_string();
            CHECK_THROWS_AS(up.free(Space(), gone), Error);
            CHECK(up.state_string() == before);
            CHECK(transfer.finish() == stamped_bytes(0, sent));
            up.free(Space(), gone);
        } else {
            up.free(Space(), gone);
            live = without(live, gone);
            up.flush(Space(), false);
            // Allocations on both sides, the peer's driving an urgent flush of this one.
            const auto fresh = up.alloc(Space(), 2 * page_size);
            REQUIRE(fresh);
            const auto fresh_peer = down.alloc(Space(), down.available_size());
            up.flush(Space(), true);
            // Stamping waits for the device: the copy has run by now on every backend.
            stamp_tokens(pool, up, 0, to_host(*fresh));
            const auto fresh_tokens = to_host(*fresh);
            live.insert(live.end(), fresh_tokens.begin(), fresh_tokens.end());
            if (fresh_peer) {
                const auto ids = to_host(*fresh_peer);
                stamp_tokens(pool, down, 1, ids);
                peer.insert(peer.end(), ids.begin(), ids.end());
            }
            CHECK(transfer.finish() == stamped_bytes(0, sent));
        }
        live = without(live, gone);
        up.flush(Space(), true);
        CHECK(up.core().gated_pages().empty());
        check_all(pool, up, 0, live);
        check_all(pool, down, 1, peer);
    }
}
