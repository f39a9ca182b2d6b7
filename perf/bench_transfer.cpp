// Building the transfer descriptors of one 32k-token request (disaggregated
// prefill, transfer_descriptors.hpp): the host work a sender or a receiver does
// per transfer, target <= 20 us. The request's tokens come from a real side's
// host mirror, either one fresh run (a dense band) or fragmented (half of them
// in the holes of a lazy band that freed every other request); the layout is
// the peer's geometry (32 layers x 8 KV heads x head_dim 128, bf16).
#include "bench_common.hpp"

#include <kvpool/model_geometry.hpp>
#include <kvpool/multi_ended_allocator.hpp>
#include <kvpool/transfer_descriptors.hpp>

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
    return transfer_layout(layout.side("full"), peer_geometry());
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
