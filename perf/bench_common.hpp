// Shared set-up of the benchmarks: the peer's geometry and timing helpers.
#pragma once

#include <kvpool/swa_pair.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

namespace kvpool::bench {

using Space = Kokkos::DefaultExecutionSpace;
using Pool = UnifiedKVPool<Space::memory_space>;
using SwaPair = UnifiedSWAAllocator<Space>;
using IndexView = MultiEndedAllocator<Space>::index_view;

// The peer's SWA geometry (peer-baseline.md): 32 layers x 8 KV heads x
// head_dim 128, bf16, K and V: 128 KiB per token per side. KVPOOL_BENCH_LAYERS
// lowers the layer count: the decode and translate rows hold about 140,000
// tokens per side, 36 GiB at 32 layers, more than a small host has.
inline index_t bytes_per_token() {
    const char* env = std::getenv("KVPOOL_BENCH_LAYERS");
    return (env ? std::atoll(env) : 32) * 8 * 128 * 2 * 2;
}

// Tokens per side; 262,144 as in the baseline unless KVPOOL_BENCH_TOKENS says
// otherwise (a host smoke run needs far less memory than 64 GiB).
inline index_t tokens_per_side() {
    const char* env = std::getenv("KVPOOL_BENCH_TOKENS");
    return env ? std::atoll(env) : 262144;
}

inline PoolLayout swa_layout(index_t page_size) {
    // Both sides' tokens plus one page of sink for each.
    const index_t token_bytes = bytes_per_token();
    const index_t bytes = 2 * (tokens_per_side() + page_size) * token_bytes;
    return PoolLayout(bytes, {{"full", token_bytes, page_size, GrowDirection::up, 0},
                              {"swa", token_bytes, page_size, GrowDirection::down, 0}});
}

inline CompactionMode mode_of(const benchmark::State& state) {
    return state.range(1) != 0 ? CompactionMode::lazy : CompactionMode::eager;
}

inline std::vector<index_t> host_copy(const IndexView& view) {
    auto mirror = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
    return {mirror.data(), mirror.data() + mirror.extent(0)};
}

inline IndexView device_copy_of(const std::vector<index_t>& host) {
    IndexView view("bench::ids", host.size());
    auto mirror = Kokkos::create_mirror_view(view);
    for (std::size_t i = 0; i < host.size(); ++i)
        mirror(i) = host[i];
    Kokkos::deep_copy(view, mirror);
    return view;
}

// Admits fresh requests of the given lengths with one alloc_extend: appends
// each request's virtual token ids to requests, or returns false (no room).
template <class Pair>
bool admit_requests(Pair& pair, const Space& space, const std::vector<index_t>& lengths,
                    std::vector<std::vector<index_t>>& requests) {
    index_t total = 0;
    for (index_t n : lengths)
        total += n;
    IndexView out("bench::out", static_cast<std::size_t>(total));
    if (!pair.alloc_extend(space, std::vector<index_t>(lengths.size(), 0), lengths,
                           device_copy_of(std::vector<index_t>(lengths.size(), -1)), out))
        return false;
    const auto ids = host_copy(out);
    auto first = ids.begin();
    for (index_t n : lengths) {
        requests.emplace_back(first, first + static_cast<std::ptrdiff_t>(n));
        first += static_cast<std::ptrdiff_t>(n);
    }
    return true;
}

// As admit_requests, and one state slot per request appended to slots (a
// composite with state slots: the Mamba pair, the tri-pool).
template <class Pair>
bool admit_requests_with_slots(Pair& pair, const Space& space, const std::vector<index_t>& lengths,
                               std::vector<std::vector<index_t>>& requests,
                               std::vector<index_t>& slots) {
    std::vector<std::vector<index_t>> admitted;
    if (!admit_requests(pair, space, lengths, admitted))
        return false;
    const auto new_slots = pair.alloc_state_slots(space, static_cast<index_t>(lengths.size()));
    if (!new_slots)
        return false;
    const auto slot_ids = host_copy(*new_slots);
    requests.insert(requests.end(), admitted.begin(), admitted.end());
    slots.insert(slots.end(), slot_ids.begin(), slot_ids.end());
    return true;
}

// Inputs of one decode step over the requests: lengths counting the new token,
// and each request's last token id (on the device).
inline void decode_inputs(const std::vector<std::vector<index_t>>& requests,
                          std::vector<index_t>& seq_lens, IndexView& last_loc) {
    seq_lens.clear();
    std::vector<index_t> last;
    for (const auto& r : requests) {
        seq_lens.push_back(static_cast<index_t>(r.size()) + 1);
        last.push_back(r.back());
    }
    last_loc = device_copy_of(last);
}

using clock = std::chrono::steady_clock;
inline double seconds_since(clock::time_point start) {
    return std::chrono::duration<double>(clock::now() - start).count();
}

// Times one call: host time until it returns, and (the benchmark's manual
// time) until its device work has finished. Fences before and after.
template <class Call> void time_call(benchmark::State& state, double& host_seconds, Call&& call) {
    Space().fence();
    const auto start = clock::now();
    call();
    host_seconds += seconds_since(start);
    Space().fence();
    state.SetIterationTime(seconds_since(start));
}

inline void report_host_time(benchmark::State& state, double host_seconds) {
    state.counters["host_us"] =
        benchmark::Counter(host_seconds * 1e6 / static_cast<double>(state.iterations()));
}

} // namespace kvpool::bench
