// Allocator calls queued behind long device work must not wait for it: no
// fence, no device-to-host copy, no wait for a staging slab the GPU has not
// read yet. Only a GPU backend queues work; host backends finish each kernel
// before returning, so there is nothing to overlap there.
#include <kvpool/kernels/dispatch.hpp>
#include <kvpool/kernels/stream_event.hpp>
#include <kvpool/swa_pair.hpp>

#include "test_support.hpp"

#include <chrono>
#include <type_traits>

using namespace kvpool;
using namespace kvpool::test;

namespace {

constexpr bool queues_device_work = !std::is_same_v<Space::memory_space, Kokkos::HostSpace>;

using SwaPair = UnifiedSWAAllocator<Space>;
using Bytes = Kokkos::View<std::uint8_t*, Space::memory_space>;
using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point start) {
    return std::chrono::duration<double>(clock::now() - start).count();
}

// Queues copies of 1 GiB inside busy, one after another, and returns at once.
void queue_busy_work(const Space& space, const Bytes& busy, const IndexView& src,
                     const IndexView& dst, int copies) {
    for (int i = 0; i < copies; ++i)
        kernels::move_pages(space, kernels::PageMoves{busy, index_t(1) << 30, src, dst});
}

// Host ids of the tokens the last allocation minted (page-aligned allocations).
std::vector<index_t> minted_tokens(const SwaPair& pair) {
    std::vector<index_t> tokens;
    const index_t page = pair.page_size();
    for (index_t v : pair.full().last_allocated_virtual_pages())
        for (index_t k = 0; k < page; ++k)
            tokens.push_back(v * page + k);
    return tokens;
}

} // namespace

TEST_CASE("async: allocator calls behind busy device work return before it finishes", "[async]") {
    if (!queues_device_work)
        SKIP("backend " KVPOOL_TEST_BACKEND_NAME " runs each kernel before returning");
    const Space space;
    Bytes busy = kk::uninitialized<Bytes>("busy", std::size_t(2) << 30);
    const IndexView busy_src = to_device({1}), busy_dst = to_device({0});
    constexpr int copies = 64; // about 36 ms on an H200

    // How long the busy work alone keeps the device.
    space.fence();
    auto start = clock::now();
    queue_busy_work(space, busy, busy_src, busy_dst, copies);
    space.fence();
    const double busy_seconds = seconds_since(start);

    for (index_t page_size : {index_t(1), index_t(16)})
        for (auto mode : {CompactionMode::eager, CompactionMode::lazy}) {
            INFO("page size " << page_size << ", "
                              << (mode == CompactionMode::eager ? "eager" : "lazy"));
            Pool pool(
                PoolLayout(index_t(64) << 20, {spec("full", 256, page_size, GrowDirection::up),
                                               spec("swa", 256, page_size, GrowDirection::down)}));
            SwaPair pair(pool, mode);
            const index_t request_tokens = 4 * page_size;
            IndexView out("out", static_cast<std::size_t>(request_tokens));
            std::vector<std::vector<index_t>> requests;
            for (int r = 0; r < 64; ++r) {
                REQUIRE(pair.alloc(space, request_tokens, out));
                requests.push_back(minted_tokens(pair));
                stamp_tokens(pool, pair.full(), 0, requests.back());
            }

            // 32 rounds of: free the oldest request, admit a new one, flush;
            // more uploads than the staging ring starts with.
            space.fence();
            start = clock::now();
            queue_busy_work(space, busy, busy_src, busy_dst, copies);
            const auto calls_start = clock::now();
            std::size_t oldest = 0;
            for (int round = 0; round < 32; ++round) {
                pair.free(space, requests[oldest++]);
                REQUIRE(pair.alloc(space, request_tokens, out));
                requests.push_back(minted_tokens(pair));
                pair.flush_opportunistic(space);
            }
            const double call_seconds = seconds_since(calls_start);
            // Had any call waited for the device, the queue would be empty now.
            kernels::StreamEvent<Space> after_calls;
            after_calls.record(space);
            const bool device_still_busy = !after_calls.is_complete();
            space.fence();
            const double total_seconds = seconds_since(start);
            INFO("busy work alone " << busy_seconds * 1e3 << " ms, the calls " << call_seconds * 1e3
                                    << " ms, all " << total_seconds * 1e3 << " ms");
            CHECK(device_still_busy);
            CHECK(total_seconds >= 0.9 * busy_seconds);

            // The compactions ran after the busy work, in order: every stamped
            // token still live keeps its bytes.
            REQUIRE_NOTHROW(pair.check_invariants());
            std::vector<index_t> stamped_live;
            for (std::size_t r = oldest; r < 64; ++r)
                stamped_live.insert(stamped_live.end(), requests[r].begin(), requests[r].end());
            CHECK(check_stamps(pool, pair.full(), 0, stamped_live) == 0);
        }
}
