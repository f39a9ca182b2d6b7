// The tri-pool (state slots, sliding-window KV floating, full KV in one
// buffer) at the peer's scale: a full side of 8 layers (32 KiB per token), a
// sliding-window side of 16 layers (64 KiB per token), 262,144 tokens of each
// and 640 state slots of 25 MiB. Times as in bench_allocator.cpp: until the
// device work is done, and host_us.
#include "bench_common.hpp"

#include <kvpool/mamba_swa_allocator.hpp>

#include <algorithm>
#include <random>

namespace kvpool::bench {

namespace {

using TriPool = UnifiedMambaSWAAllocator<Space>;

constexpr index_t full_token_bytes = 8 * 8 * 128 * 2 * 2;
constexpr index_t swa_token_bytes = 2 * full_token_bytes;
constexpr index_t state_slot_bytes = index_t(25) << 20;

index_t tri_state_slots() {
    return std::max<index_t>(80, tokens_per_side() * 640 / 262144);
}

// float_at: where the empty sliding-window band starts, as a fraction of the buffer.
PoolLayout tri_layout(index_t page_size, double float_at) {
    const index_t bytes = (tokens_per_side() + page_size) * (full_token_bytes + swa_token_bytes) +
                          (tri_state_slots() + 1) * state_slot_bytes;
    SubPoolSpec swa{"swa", swa_token_bytes, page_size, GrowDirection::floating, 0};
    swa.float_at = float_at;
    return PoolLayout(bytes, {{"mamba", state_slot_bytes, 1, GrowDirection::up, 0},
                              swa,
                              {"full", full_token_bytes, page_size, GrowDirection::down, 0}});
}

struct TriServing {
    index_t page_size;
    Pool pool;
    TriPool tri;
    Space space;
    std::vector<std::vector<index_t>> requests;
    std::vector<index_t> slots;

    TriServing(index_t ps, CompactionMode mode, double float_at = 0.5)
        : page_size(ps), pool(tri_layout(ps, float_at)), tri(pool, mode) {}

    // Requests with their KV (one alloc_extend) and one state slot each.
    bool admit(const std::vector<index_t>& lengths) {
        return admit_requests_with_slots(tri, space, lengths, requests, slots);
    }
};

void tri_decode_alloc(benchmark::State& state) {
    TriServing s(state.range(0), mode_of(state));
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
        const auto undo = s.tri.backup_state();
        time_call(state, host, [&] {
            if (!s.tri.alloc_decode(s.space, seq_lens, last_loc, out))
                state.SkipWithError("decode allocation failed");
        });
        s.tri.restore_state(s.space, undo);
    }
    report_host_time(state, host);
}

void tri_prefill_alloc(benchmark::State& state) {
    TriServing s(state.range(0), mode_of(state));
    const std::vector<index_t> prefix(32, 0), seq(32, 512);
    const IndexView last_loc = device_copy_of(std::vector<index_t>(32, -1));
    IndexView out("bench::out", 32 * 512);
    double host = 0;
    for (auto _ : state) {
        const auto undo = s.tri.backup_state();
        time_call(state, host, [&] {
            if (!s.tri.alloc_extend(s.space, prefix, seq, last_loc, out))
                state.SkipWithError("prefill allocation failed");
        });
        s.tri.restore_state(s.space, undo);
    }
    report_host_time(state, host);
}

// Frees one 512-token request from the middle (both KV sides; eager: 48 MiB
// to move), then admits a replacement.
void tri_free_middle_request(benchmark::State& state) {
    TriServing s(state.range(0), mode_of(state));
    for (int batch = 0; batch < 4; ++batch)
        if (!s.admit(std::vector<index_t>(16, 512)))
            return state.SkipWithError("set-up admission failed");
    double host = 0;
    for (auto _ : state) {
        const std::size_t middle = s.requests.size() / 2;
        time_call(state, host, [&] { s.tri.free(s.space, s.requests[middle]); });
        s.tri.free_state_slots(s.space, {s.slots[middle]});
        s.requests.erase(s.requests.begin() + static_cast<std::ptrdiff_t>(middle));
        s.slots.erase(s.slots.begin() + static_cast<std::ptrdiff_t>(middle));
        s.tri.flush_opportunistic(s.space);
        if (!s.admit({512}))
            state.SkipWithError("re-admission failed");
    }
    report_host_time(state, host);
}

// A state slot the gap next to the state band cannot hold: the
// sliding-window band (64 requests of 512 tokens, starting just above the
// state band) shifts up by 25 MiB, moving its lowest pages to its far side.
void tri_band_shift(benchmark::State& state) {
    TriServing s(state.range(0), mode_of(state), 0.0001);
    double host = 0;
    index_t moved = 0;
    for (auto _ : state) {
        s.tri.clear(s.space);
        s.requests.clear();
        s.slots.clear();
        std::vector<std::vector<index_t>> admitted;
        if (!admit_requests(s.tri, s.space, std::vector<index_t>(64, 512), admitted)) {
            state.SkipWithError("set-up admission failed");
            break;
        }
        const index_t before = s.tri.swa().counters().bytes_moved;
        const index_t shifts = s.tri.swa().counters().shifts;
        time_call(state, host, [&] {
            if (!s.tri.alloc_state_slots(s.space, 1))
                state.SkipWithError("state slot allocation failed");
        });
        if (s.tri.swa().counters().shifts != shifts + 1)
            state.SkipWithError("the allocation did not shift the band");
        moved = s.tri.swa().counters().bytes_moved - before;
    }
    report_host_time(state, host);
    state.counters["bytes_moved_per_shift"] = static_cast<double>(moved);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * moved);
}

// An urgent flush of all three bands: every other request's KV and state
// slot of 26 is freed, so each band moves half of them into its holes.
void tri_lazy_flush(benchmark::State& state) {
    TriServing s(state.range(0), CompactionMode::lazy);
    double host = 0;
    index_t moved = 0;
    const auto bytes_moved = [&] {
        return s.tri.full().counters().bytes_moved + s.tri.swa().counters().bytes_moved +
               s.tri.state().counters().bytes_moved;
    };
    for (auto _ : state) {
        s.tri.clear(s.space);
        s.requests.clear();
        s.slots.clear();
        if (!s.admit(std::vector<index_t>(26, 256))) {
            state.SkipWithError("set-up admission failed");
            break;
        }
        for (std::size_t r = 0; r < 26; r += 2) {
            s.tri.free(s.space, s.requests[r]);
            s.tri.free_state_slots(s.space, {s.slots[r]});
        }
        const index_t before = bytes_moved();
        time_call(state, host, [&] {
            s.tri.full().flush(s.space, true);
            s.tri.swa().flush(s.space, true);
            s.tri.state().flush(s.space, true);
        });
        moved = bytes_moved() - before;
    }
    report_host_time(state, host);
    state.counters["bytes_moved_per_flush"] = static_cast<double>(moved);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * moved);
}

void tri_modes(benchmark::internal::Benchmark* b) {
    b->ArgNames({"page", "lazy"});
    b->Args({1, 0})->Args({16, 0})->Args({16, 1});
    b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

} // namespace

BENCHMARK(tri_decode_alloc)->Apply(tri_modes);
BENCHMARK(tri_prefill_alloc)->Apply(tri_modes);
BENCHMARK(tri_free_middle_request)->Apply(tri_modes);
BENCHMARK(tri_band_shift)->Apply(tri_modes);
BENCHMARK(tri_lazy_flush)
    ->ArgNames({"page"})
    ->Arg(16)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

} // namespace kvpool::bench
