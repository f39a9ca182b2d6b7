// The KV move kernel alone against the device's own copy of the same bytes,
// measured in the same run: 1 GiB of pages from the upper half of a buffer
// into the lower half, as a lazy flush moves them.
#include "bench_common.hpp"

#include <kvpool/kernels/dispatch.hpp>

#include <numeric>

namespace kvpool::bench {

namespace {

constexpr index_t bytes_moved = index_t(1) << 30;

using Bytes = Kokkos::View<std::uint8_t*, Space::memory_space>;

struct MoveSetup {
    Bytes bytes;
    IndexView src, dst;
    explicit MoveSetup(index_t page_bytes)
        : bytes(
              kk::uninitialized<Bytes>("bench::bytes", static_cast<std::size_t>(2 * bytes_moved))) {
        const index_t pages = bytes_moved / page_bytes;
        auto host_src = Kokkos::View<index_t*, Kokkos::HostSpace>("src", pages);
        auto host_dst = Kokkos::View<index_t*, Kokkos::HostSpace>("dst", pages);
        for (index_t i = 0; i < pages; ++i) {
            host_dst(i) = i;
            host_src(i) = 2 * pages - 1 - i; // topmost survivor into lowest hole
        }
        src = IndexView("bench::src", pages);
        dst = IndexView("bench::dst", pages);
        Kokkos::deep_copy(src, host_src);
        Kokkos::deep_copy(dst, host_dst);
        Kokkos::deep_copy(bytes, std::uint8_t(1));
    }
};

// Bytes read plus bytes written, the way copy bandwidth is quoted.
void report_bytes(benchmark::State& state) {
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * bytes_moved);
}

template <bool Native> void move_pages(benchmark::State& state) {
    const index_t page_bytes = state.range(0);
    MoveSetup setup(page_bytes);
    const Space space;
    const kernels::PageMoves moves{setup.bytes, page_bytes, setup.src, setup.dst};
    for (auto _ : state) {
        space.fence();
        const auto start = clock::now();
        if (Native)
            kernels::move_pages(space, moves);
        else
            kernels::portable::move_pages(space, moves);
        space.fence();
        state.SetIterationTime(seconds_since(start));
    }
    report_bytes(state);
}

void device_copy(benchmark::State& state) {
    MoveSetup setup(state.range(0));
    const Space space;
    const auto lower =
        Kokkos::subview(setup.bytes, std::make_pair<std::size_t, std::size_t>(0, bytes_moved));
    const auto upper = Kokkos::subview(
        setup.bytes, std::make_pair<std::size_t, std::size_t>(bytes_moved, 2 * bytes_moved));
    for (auto _ : state) {
        space.fence();
        const auto start = clock::now();
        Kokkos::deep_copy(space, lower, upper);
        space.fence();
        state.SetIterationTime(seconds_since(start));
    }
    report_bytes(state);
}

// A compaction plan as an eager free of one 512-token request makes it: 64 MiB
// of pages moved plus their table writes, in one apply_plan launch, the page
// lists read from page-locked host memory (zero-copy) or from device memory.
template <bool DeviceLists> void plan_moves(benchmark::State& state) {
    const index_t page_bytes = state.range(0);
    const index_t pages = (index_t(64) << 20) / page_bytes;
    using Pinned = Kokkos::View<index_t*, kk::pinned_host_space<Space>::type>;
    Bytes bytes =
        kk::uninitialized<Bytes>("bench::bytes", static_cast<std::size_t>(4 * pages * page_bytes));
    Pinned host_src("src", pages), host_dst("dst", pages), rows("rows", 2 * pages),
        values("values", 2 * pages);
    for (index_t i = 0; i < pages; ++i) {
        host_src(i) = 4 * pages - 1 - i;
        host_dst(i) = pages + i;
    }
    for (index_t i = 0; i < 2 * pages; ++i) {
        rows(i) = i;
        values(i) = i + 1;
    }
    IndexView table("bench::table", static_cast<std::size_t>(4 * pages));
    IndexView device_src("bench::src", pages), device_dst("bench::dst", pages);
    Kokkos::deep_copy(device_src, host_src);
    Kokkos::deep_copy(device_dst, host_dst);
    const Space space;
    const kernels::TableWrites writes{table, rows, values, table, rows, values};
    const auto plan = [&] {
        if constexpr (DeviceLists)
            return kernels::CompactionPlan{
                kernels::PageMoves{bytes, page_bytes, device_src, device_dst}, writes};
        else
            return kernels::CompactionPlan{
                kernels::PageMoves{bytes, page_bytes, host_src, host_dst}, writes};
    }();
    for (auto _ : state) {
        space.fence();
        const auto start = clock::now();
        kernels::apply_plan(space, plan);
        space.fence();
        state.SetIterationTime(seconds_since(start));
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * pages * page_bytes);
}

} // namespace

BENCHMARK(plan_moves<false>)
    ->Name("kv_move/plan_lists_pinned")
    ->Arg(128 << 10)
    ->Arg(2 << 20)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(plan_moves<true>)
    ->Name("kv_move/plan_lists_device")
    ->Arg(128 << 10)
    ->Arg(2 << 20)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(move_pages<true>)
    ->Name("kv_move/native")
    ->Arg(128 << 10)
    ->Arg(2 << 20)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(move_pages<false>)
    ->Name("kv_move/portable")
    ->Arg(128 << 10)
    ->Arg(2 << 20)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(device_copy)
    ->Name("kv_move/device_copy")
    ->Arg(128 << 10)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

} // namespace kvpool::bench
