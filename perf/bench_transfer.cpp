// Building the transfer descriptors of one 32k-token request (disaggregated
// prefill, transfer_descriptors.hpp): the host work a sender or a receiver does
// per transfer, target <= 20 us. The request's tokens come from a real side's
// host mirror, either one fresh run (a dense band) or fragmented (half of them
// in the holes of a lazy band that freed every other request); the layout is
// the peer's geometry (32 layers x 8 KV heads x head_dim 128, bf16). And the
// copy of such a request's 4 GiB between two buffers of one device by
// copy_runs, against the device's own copy of the same bytes (target: >= 80 %).
#include "bench_common.hpp"

#include <kvpool/multi_ended_allocator.hpp>
#include <kvpool/storage/model_geometry.hpp>
#include <kvpool/storage/transfer_copy.hpp>
#include <kvpool/storage/transfer_descriptors.hpp>

namespace {

using namespace kvpool;
using namespace kvpool::bench;

constexpr index_t request_tokens = 32768;

MHAGeometry peer_geometry() {
    MHAGeometry g;
    g.layers = 32;
    g.heads = 8;
    g.head_dim = 128;
    g.dtype = KVDtype::bf16;
    return g;
}

// The request's virtual tokens on a side of small entries (its placement is
// what matters, not its bytes), and the side; fragmented: every other of 128
// earlier requests freed first, so half the request lands in their holes.
struct Placed {
    Pool pool;
    MultiEndedAllocator<Space> side;
    std::vector<index_t> tokens;

    Placed(index_t page_size, bool fragmented)
        : pool(PoolLayout(64 * (3 * request_tokens + 4 * page_size),
                          {{"full", 64, page_size, GrowDirection::up, 0}})),
          side(pool, "full", lazy()) {
        const Space space;
        if (fragmented) {
            std::vector<std::vector<index_t>> earlier;
            for (int i = 0; i < 128; ++i)
                earlier.push_back(host_copy(*side.alloc(space, request_tokens / 128)));
            for (std::size_t i = 0; i < earlier.size(); i += 2)
                side.free(space, earlier[i]);
        }
        tokens = host_copy(*side.alloc(space, request_tokens));
    }
    static AllocatorOptions lazy() {
        AllocatorOptions o;
        o.mode = CompactionMode::lazy;
        return o;
    }
};

// The peer's layout at this page size, over a buffer large enough for the
// pages the placement used.
SubPoolTransferLayout peer_layout(index_t page_size) {
    const SubPoolSpec spec = sub_pool_spec("full", peer_geometry(), page_size, GrowDirection::up);
    const PoolLayout layout(spec.entry_bytes * (3 * request_tokens + 4 * page_size), {spec});
    return transfer_layout(layout.sub_pool("full"), peer_geometry());
}

// range(0): page size; range(1): fragmented.
void describe(benchmark::State& state) {
    const index_t ps = state.range(0);
    const Placed placed(ps, state.range(1) != 0);
    const auto physical = host_physical_tokens(placed.side, placed.tokens);
    const auto layout = peer_layout(ps);
    TransferDescriptor d;
    for (auto _ : state) {
        const auto start = clock::now();
        d = describe_transfer(layout, physical);
        benchmark::DoNotOptimize(d.page_runs.data());
        state.SetIterationTime(seconds_since(start));
    }
    state.counters["page_runs"] = static_cast<double>(d.page_runs.size());
    state.counters["token_runs"] = static_cast<double>(d.token_runs.size());
}

// The sender's whole host part but the gate: virtual ids through the host
// mirror, then the descriptor.
void translate_and_describe(benchmark::State& state) {
    const index_t ps = state.range(0);
    const Placed placed(ps, state.range(1) != 0);
    const auto layout = peer_layout(ps);
    for (auto _ : state) {
        const auto start = clock::now();
        const auto d = describe_transfer(layout, host_physical_tokens(placed.side, placed.tokens));
        benchmark::DoNotOptimize(d.page_runs.data());
        state.SetIterationTime(seconds_since(start));
    }
}

// Every layer's K and V runs (64 lists), for an engine that sends layer by layer.
void all_layer_runs(benchmark::State& state) {
    const index_t ps = state.range(0);
    const Placed placed(ps, state.range(1) != 0);
    const auto layout = peer_layout(ps);
    const auto d = describe_transfer(layout, host_physical_tokens(placed.side, placed.tokens));
    std::size_t runs = 0;
    for (auto _ : state) {
        const auto start = clock::now();
        runs = 0;
        for (index_t l = 0; l < layout.layers; ++l)
            for (index_t b = 0; b < layout.blocks_per_layer(); ++b)
                runs += layer_runs(layout, d, l, b).size();
        benchmark::DoNotOptimize(runs);
        state.SetIterationTime(seconds_since(start));
    }
    state.counters["runs"] = static_cast<double>(runs);
}

using Bytes = Kokkos::View<std::uint8_t*, Space::memory_space>;

// The request's bytes at the peer's geometry (KVPOOL_BENCH_LAYERS lowers it): 4 GiB.
index_t request_bytes() {
    return request_tokens * bytes_per_token() / 2;
}

// The paired whole-page copies of the request between two buffers of one device
// (what copy_runs does for CUDA IPC): its pages consecutive on both ends (one
// run), or every other page on the sender (a run per page); the bytes moved
// counted read plus written, as pd_transfer/device_copy_32k counts its own.
void copy_paired_runs(benchmark::State& state) {
    const index_t ps = state.range(0);
    const bool fragmented = state.range(1) != 0;
    const index_t page_bytes = ps * bytes_per_token() / 2, pages = request_tokens / ps;
    const Bytes src = kk::uninitialized<Bytes>("bench::src", 2 * request_bytes());
    const Bytes dst = kk::uninitialized<Bytes>("bench::dst", request_bytes());
    Kokkos::deep_copy(src, std::uint8_t(1));
    std::vector<CopyRun> runs;
    if (fragmented)
        for (index_t p = 0; p < pages; ++p)
            runs.push_back({2 * p * page_bytes, p * page_bytes, page_bytes});
    else
        runs.push_back({0, 0, request_bytes()});
    const Space space;
    for (auto _ : state) {
        space.fence();
        const auto start = clock::now();
        copy_runs(space, src.data(), 2 * request_bytes(), dst.data(), request_bytes(), runs);
        space.fence();
        state.SetIterationTime(seconds_since(start));
    }
    state.counters["runs"] = static_cast<double>(runs.size());
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * request_bytes());
}

// The limit: the device's own copy of the same bytes, one contiguous range.
void device_copy(benchmark::State& state) {
    const Bytes src = kk::uninitialized<Bytes>("bench::src", request_bytes());
    const Bytes dst = kk::uninitialized<Bytes>("bench::dst", request_bytes());
    Kokkos::deep_copy(src, std::uint8_t(1));
    const Space space;
    for (auto _ : state) {
        space.fence();
        const auto start = clock::now();
        Kokkos::deep_copy(space, dst, src);
        space.fence();
        state.SetIterationTime(seconds_since(start));
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * request_bytes());
}

void page_size_args(benchmark::internal::Benchmark* b) {
    for (const int ps : {1, 16, 64})
        for (const int fragmented : {0, 1})
            b->Args({ps, fragmented});
}

} // namespace

BENCHMARK(describe)
    ->Name("pd_transfer/describe_32k")
    ->Apply(page_size_args)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(translate_and_describe)
    ->Name("pd_transfer/host_translate_describe_32k")
    ->Apply(page_size_args)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(all_layer_runs)
    ->Name("pd_transfer/all_layer_runs_32k")
    ->Args({16, 0})
    ->Args({16, 1})
    ->Args({64, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(copy_paired_runs)
    ->Name("pd_transfer/copy_runs_32k")
    ->Args({16, 0})
    ->Args({1, 1})
    ->Args({16, 1})
    ->Args({64, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(device_copy)
    ->Name("pd_transfer/device_copy_32k")
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
