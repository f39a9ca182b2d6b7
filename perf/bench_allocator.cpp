// The allocator's operations at the peer's geometry (peer-baseline.md): SWA
// pair, 128 KiB per token per side, page sizes 1 and 16, eager and lazy. Each
// reports the time until its device work is done (the benchmark time) and the
// host time until the call returned (host_us). The *_zeroed variants run the
// same calls with handout zeroing on both sides (AllocatorOptions::zero_on_alloc).
#include "bench_common.hpp"

#include <kvpool/kernels/dispatch.hpp>

#include <random>

namespace kvpool::bench {

namespace {

// A pool with its pair and the engine-side record of running requests.
struct Serving {
    index_t page_size;
    Pool pool;
    SwaPair pair;
    Space space;
    std::vector<std::vector<index_t>> requests; // virtual token ids per request

    Serving(index_t ps, CompactionMode mode, bool zero = false)
        : page_size(ps), pool(swa_layout(ps)),
          pair(pool, options(mode, zero), options(mode, zero)) {}

    static AllocatorOptions options(CompactionMode mode, bool zero) {
        AllocatorOptions o;
        o.mode = mode;
        o.zero_on_alloc = zero;
        return o;
    }

    bool admit(const std::vector<index_t>& lengths) {
        return admit_requests(pair, space, lengths, requests);
    }
};

void prefill_alloc_with(benchmark::State& state, bool zero) {
    Serving s(state.range(0), mode_of(state), zero);
    const std::vector<index_t> prefix(32, 0), seq(32, 512);
    const IndexView last_loc = device_copy_of(std::vector<index_t>(32, -1));
    IndexView out("bench::out", 32 * 512);
    double host = 0;
    for (auto _ : state) {
        const auto full_undo = s.pair.full().backup_state();
        const auto swa_undo = s.pair.swa().backup_state();
        time_call(state, host, [&] {
            const bool ok = s.page_size == 1
                                ? s.pair.alloc(s.space, 32 * 512, out)
                                : s.pair.alloc_extend(s.space, prefix, seq, last_loc, out);
            if (!ok)
                state.SkipWithError("prefill allocation failed");
        });
        s.pair.swa().restore_state(s.space, swa_undo);
        s.pair.full().restore_state(s.space, full_undo);
    }
    report_host_time(state, host);
}

void decode_alloc_with(benchmark::State& state, bool zero) {
    Serving s(state.range(0), mode_of(state), zero);
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
        const auto full_undo = s.pair.full().backup_state();
        const auto swa_undo = s.pair.swa().backup_state();
        time_call(state, host, [&] {
            const bool ok = s.page_size == 1
                                ? s.pair.alloc(s.space, 256, out)
                                : s.pair.alloc_decode(s.space, seq_lens, last_loc, out);
            if (!ok)
                state.SkipWithError("decode allocation failed");
        });
        s.pair.swa().restore_state(s.space, swa_undo);
        s.pair.full().restore_state(s.space, full_undo);
    }
    report_host_time(state, host);
}

// The same decode allocation queued behind 1 GiB of copying: if any call
// waited for the device, its host time would grow by the copy's duration.
void decode_alloc_behind_busy_device(benchmark::State& state) {
    Serving s(state.range(0), mode_of(state));
    if (!s.admit(std::vector<index_t>(256, 300)))
        return state.SkipWithError("set-up admission failed");
    std::vector<index_t> seq_lens;
    IndexView last_loc;
    decode_inputs(s.requests, seq_lens, last_loc);
    IndexView out("bench::out", 256);
    const index_t busy_bytes = index_t(1) << 30;
    Kokkos::View<std::uint8_t*, Space::memory_space> busy("bench::busy",
                                                          static_cast<std::size_t>(2 * busy_bytes));
    const IndexView busy_src = device_copy_of({1}), busy_dst = device_copy_of({0});
    for (auto _ : state) {
        const auto full_undo = s.pair.full().backup_state();
        const auto swa_undo = s.pair.swa().backup_state();
        s.space.fence();
        kernels::move_pages(s.space, kernels::PageMoves{busy, busy_bytes, busy_src, busy_dst});
        const auto start = clock::now();
        if (!s.pair.alloc_decode(s.space, seq_lens, last_loc, out))
            state.SkipWithError("decode allocation failed");
        state.SetIterationTime(seconds_since(start));
        s.space.fence();
        s.pair.swa().restore_state(s.space, swa_undo);
        s.pair.full().restore_state(s.space, full_undo);
    }
}

void free_middle_request(benchmark::State& state) {
    Serving s(state.range(0), mode_of(state));
    for (int batch = 0; batch < 4; ++batch)
        if (!s.admit(std::vector<index_t>(16, 512)))
            return state.SkipWithError("set-up admission failed");
    double host = 0;
    index_t moved = 0;
    for (auto _ : state) {
        const std::size_t middle = s.requests.size() / 2;
        const index_t before =
            s.pair.full().counters().bytes_moved + s.pair.swa().counters().bytes_moved;
        time_call(state, host, [&] { s.pair.free(s.space, s.requests[middle]); });
        moved +=
            s.pair.full().counters().bytes_moved + s.pair.swa().counters().bytes_moved - before;
        s.requests.erase(s.requests.begin() + static_cast<std::ptrdiff_t>(middle));
        s.pair.flush_opportunistic(s.space);
        if (!s.admit({512}))
            state.SkipWithError("re-admission failed");
    }
    report_host_time(state, host);
    state.counters["bytes_moved_per_free"] =
        benchmark::Counter(static_cast<double>(moved), benchmark::Counter::kAvgIterations);
}

void translate(benchmark::State& state) {
    Serving s(state.range(0), mode_of(state));
    if (!s.admit(std::vector<index_t>(64, 2048)))
        return state.SkipWithError("set-up admission failed");
    std::vector<index_t> ids;
    for (const auto& r : s.requests)
        ids.insert(ids.end(), r.begin(), r.end());
    ids.insert(ids.end(), ids.begin(), ids.end());
    const IndexView in = device_copy_of(ids);
    IndexView out("bench::translated", ids.size());
    double host = 0;
    for (auto _ : state)
        time_call(state, host, [&] { s.pair.translate_full(s.space, in, out); });
    report_host_time(state, host);
    state.counters["ids"] = static_cast<double>(ids.size());
}

// An urgent flush that moves 1 GiB of one side's KV: the lower half of the
// band freed, the upper half moved down.
void lazy_flush(benchmark::State& state) {
    Serving s(state.range(0), CompactionMode::lazy);
    const index_t tokens = (index_t(1) << 30) / bytes_per_token();
    double host = 0;
    for (auto _ : state) {
        s.pair.clear(s.space);
        s.requests.clear();
        if (!s.admit({tokens}) || !s.admit({tokens})) {
            state.SkipWithError("set-up admission failed");
            break;
        }
        s.pair.free(s.space, s.requests[0]);
        const index_t moved_before = s.pair.full().counters().bytes_moved;
        time_call(state, host, [&] { s.pair.full().flush(s.space, true); });
        if (s.pair.full().counters().bytes_moved - moved_before != index_t(1) << 30)
            state.SkipWithError("the flush did not move 1 GiB");
    }
    report_host_time(state, host);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * (index_t(1) << 30));
}

// One scheduler step with 256 running requests: decode all, finish 4, admit 4.
void serving_step_with(benchmark::State& state, bool zero) {
    Serving s(state.range(0), mode_of(state), zero);
    std::mt19937_64 rng(2);
    std::vector<index_t> lengths;
    for (int r = 0; r < 256; ++r)
        lengths.push_back(100 + static_cast<index_t>(rng() % 900));
    if (!s.admit(lengths))
        return state.SkipWithError("set-up admission failed");
    std::vector<index_t> seq_lens;
    IndexView last_loc;
    double host = 0;
    index_t moved = 0;
    for (auto _ : state) {
        const index_t moved_before =
            s.pair.full().counters().bytes_moved + s.pair.swa().counters().bytes_moved;
        decode_inputs(s.requests, seq_lens, last_loc);
        IndexView out("bench::out", s.requests.size());
        std::vector<std::vector<index_t>> finished(s.requests.begin(), s.requests.begin() + 4);
        bool ok = true;
        time_call(state, host, [&] {
            ok = s.pair.alloc_decode(s.space, seq_lens, last_loc, out);
            for (const auto& r : finished)
                s.pair.free(s.space, r);
            s.pair.flush_opportunistic(s.space);
        });
        if (!ok)
            state.SkipWithError("decode allocation failed");
        moved += s.pair.full().counters().bytes_moved + s.pair.swa().counters().bytes_moved -
                 moved_before;
        const auto decoded = host_copy(out);
        for (std::size_t r = 0; r < s.requests.size(); ++r)
            s.requests[r].push_back(decoded[r]);
        s.requests.erase(s.requests.begin(), s.requests.begin() + 4);
        if (!s.admit(std::vector<index_t>(4, 512)))
            state.SkipWithError("admission failed");
    }
    report_host_time(state, host);
    // The step's compaction: its device time cannot be less than copying these bytes.
    state.counters["bytes_moved_per_step"] =
        benchmark::Counter(static_cast<double>(moved), benchmark::Counter::kAvgIterations);
}

void prefill_alloc(benchmark::State& state) {
    prefill_alloc_with(state, false);
}
void prefill_alloc_zeroed(benchmark::State& state) {
    prefill_alloc_with(state, true);
}
void decode_alloc(benchmark::State& state) {
    decode_alloc_with(state, false);
}
void decode_alloc_zeroed(benchmark::State& state) {
    decode_alloc_with(state, true);
}
void serving_step(benchmark::State& state) {
    serving_step_with(state, false);
}
void serving_step_zeroed(benchmark::State& state) {
    serving_step_with(state, true);
}

void both_modes(benchmark::internal::Benchmark* b) {
    b->ArgNames({"page", "lazy"});
    for (int page : {1, 16})
        for (int lazy : {0, 1})
            b->Args({page, lazy});
    b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

} // namespace

BENCHMARK(prefill_alloc)->Apply(both_modes);
BENCHMARK(decode_alloc)->Apply(both_modes);
BENCHMARK(decode_alloc_behind_busy_device)->Apply(both_modes);
BENCHMARK(free_middle_request)->Apply(both_modes);
BENCHMARK(translate)->Apply(both_modes);
BENCHMARK(lazy_flush)
    ->ArgNames({"page"})
    ->Arg(1)
    ->Arg(16)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(serving_step)->Apply(both_modes);
BENCHMARK(prefill_alloc_zeroed)->Apply(both_modes);
BENCHMARK(decode_alloc_zeroed)->Apply(both_modes);
BENCHMARK(serving_step_zeroed)->Apply(both_modes);

} // namespace kvpool::bench
