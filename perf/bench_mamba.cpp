// The Mamba pair at the peer's geometry (peer-baseline.md): a full side of
// 8 layers (32 KiB per token) and 640 state slots of 25 MiB, one buffer.
// Times as in bench_allocator.cpp: until the device work is done, and host_us.
#include "bench_common.hpp"

#include <kvpool/mamba_pair.hpp>

#include <algorithm>
#include <random>

namespace kvpool::bench {

namespace {

using MambaPair = UnifiedMambaAllocator<Space>;

constexpr index_t full_bytes_per_token = 8 * 8 * 128 * 2 * 2;
constexpr index_t state_slot_bytes = index_t(25) << 20;

// 640 slots at the baseline's 262,144 tokens; scaled with a reduced pool
// (KVPOOL_BENCH_TOKENS), but never below the 80 the benchmarks hold at once.
index_t state_slots() {
    return std::max<index_t>(80, tokens_per_side() * 640 / 262144);
}

PoolLayout mamba_layout(index_t page_size) {
    const index_t bytes = (tokens_per_side() + page_size) * full_bytes_per_token +
                          (state_slots() + 1) * state_slot_bytes;
    return PoolLayout(bytes, {{"full", full_bytes_per_token, page_size, GrowDirection::up, 0},
                              {"mamba", state_slot_bytes, 1, GrowDirection::down, 0}});
}

// A pool with its pair and the engine's record of running requests: virtual
// token ids and the state slot of each.
struct MambaServing {
    index_t page_size;
    Pool pool;
    MambaPair pair;
    Space space;
    std::vector<std::vector<index_t>> requests;
    std::vector<index_t> slots;

    MambaServing(index_t ps, CompactionMode mode)
        : page_size(ps), pool(mamba_layout(ps)), pair(pool, mode) {}

    // Requests with their KV (one alloc_extend) and one state slot each.
    bool admit(const std::vector<index_t>& lengths) {
        return admit_requests_with_slots(pair, space, lengths, requests, slots);
    }
};

void mamba_decode_alloc(benchmark::State& state) {
    MambaServing s(state.range(0), mode_of(state));
    std::mt19937_64 rng(1);
    std::vector<index_t> lengths;
    for (int r = 0; r < 256; ++r)
        lengths.push_back(100 + static_cast<index_t>(rng() % 900));
    if (!s.admit(lengths))
        return state.SkipWithError("set-up admission failed");
    std::vector<index_t> seq_lens;
    IndexView last_loc;
    decode_inputs(s.requests, seq_lens, last_loc);
    IndexView out("bench::out", 256);
    double host = 0;
    for (auto _ : state) {
        const auto undo = s.pair.full().backup_state();
        time_call(state, host, [&] {
            const bool ok = s.page_size == 1
                                ? s.pair.full().alloc(s.space, 256, out)
                                : s.pair.alloc_decode(s.space, seq_lens, last_loc, out);
            if (!ok)
                state.SkipWithError("decode allocation failed");
        });
        s.pair.full().restore_state(s.space, undo);
    }
    report_host_time(state, host);
}

// Frees one 512-token request (its KV, eager: 16 MiB to move) or one state
// slot (eager: 25 MiB to move) from the middle, then admits a replacement.
void mamba_free_middle(benchmark::State& state, bool state_slot) {
    MambaServing s(state.range(0), mode_of(state));
    for (int batch = 0; batch < 4; ++batch)
        if (!s.admit(std::vector<index_t>(16, 512)))
            return state.SkipWithError("set-up admission failed");
    double host = 0;
    for (auto _ : state) {
        const std::size_t middle = s.requests.size() / 2;
        time_call(state, host, [&] {
            if (state_slot)
                s.pair.free_state_slots(s.space, {s.slots[middle]});
            else
                s.pair.free(s.space, s.requests[middle]);
        });
        if (state_slot)
            s.pair.free(s.space, s.requests[middle]);
        else
            s.pair.free_state_slots(s.space, {s.slots[middle]});
        s.requests.erase(s.requests.begin() + static_cast<std::ptrdiff_t>(middle));
        s.slots.erase(s.slots.begin() + static_cast<std::ptrdiff_t>(middle));
        s.pair.flush_opportunistic(s.space);
        if (!s.admit({512}))
            state.SkipWithError("re-admission failed");
    }
    report_host_time(state, host);
}

void mamba_free_middle_request(benchmark::State& state) {
    mamba_free_middle(state, false);
}
void mamba_free_middle_slot(benchmark::State& state) {
    mamba_free_middle(state, true);
}

// An urgent flush of both sides moving about the peer's 329 MiB: the KV of the
// first 13 requests is freed (holes at the base of the full band, which grows
// up) and the state slots of the last 13 (holes at the base of the state band,
// which grows down and hands out ascending addresses), so the flush moves 13
// requests' KV and 13 slots (325 MiB) into them.
void mamba_lazy_flush(benchmark::State& state) {
    MambaServing s(state.range(0), CompactionMode::lazy);
    double host = 0;
    index_t moved = 0;
    for (auto _ : state) {
        s.pair.clear(s.space);
        s.requests.clear();
        s.slots.clear();
        if (!s.admit(std::vector<index_t>(26, 64))) {
            state.SkipWithError("set-up admission failed");
            break;
        }
        for (std::size_t r = 0; r < 13; ++r) {
            s.pair.free(s.space, s.requests[r]);
            s.pair.free_state_slots(s.space, {s.slots[13 + r]});
        }
        const index_t before =
            s.pair.full().counters().bytes_moved + s.pair.state().counters().bytes_moved;
        time_call(state, host, [&] {
            s.pair.full().flush(s.space, true);
            s.pair.state().flush(s.space, true);
        });
        moved =
            s.pair.full().counters().bytes_moved + s.pair.state().counters().bytes_moved - before;
    }
    report_host_time(state, host);
    state.counters["bytes_moved_per_flush"] = static_cast<double>(moved);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * moved);
}

void mamba_modes(benchmark::internal::Benchmark* b) {
    b->ArgNames({"page", "lazy"});
    b->Args({1, 0})->Args({16, 0})->Args({16, 1});
    b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

} // namespace

BENCHMARK(mamba_decode_alloc)->Apply(mamba_modes);
BENCHMARK(mamba_free_middle_request)->Apply(mamba_modes);
BENCHMARK(mamba_free_middle_slot)->Apply(mamba_modes);
BENCHMARK(mamba_lazy_flush)
    ->ArgNames({"page"})
    ->Arg(16)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

} // namespace kvpool::bench
