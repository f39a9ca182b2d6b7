// The constants kvpool chose by timing them on one GPU, in one place, each
// with where and when it was measured (perf/RESULTS.md, the commit that set
// it). Tuning<Runtime> is the policy of one runtime (cuda::Runtime,
// hip::Runtime; void for the host backends), read through
// NativeBackend<Space>::tuning; a runtime or architecture measured to want
// other values specialises it. No Kokkos and no vendor header, so that the
// native sources read it too.
#pragma once

#include <kvpool/types.hpp>

#include <cstddef>

namespace kvpool::kernels {

// Measured on an NVIDIA H200 (sm_90 code, Kokkos 3.4.1 Cuda, nvcc 11.8),
// 2026-11-29 to 2026-12-02.
struct H200Tuning {
    // Native kernels: threads of every block, and the 16-byte vectors each
    // thread of a page-move block copies (all its loads issued before its
    // stores). The move kernel copies 1 GiB at 96-97% of the device copy with
    // 128 KiB and 2 MiB pages (first and second sessions, 2026-11-29).
    static constexpr int threads_per_block = 256;
    static constexpr int vectors_per_thread = 4;
    // Blocks of the byte-wise move kernel (pages not 16-byte aligned), which
    // loops over the rest: a cap, not measured.
    static constexpr index_t max_byte_move_blocks = 65535;

    // Fewest moves a flush launches ahead of its table writes: the second
    // launch must cost less than the bookkeeping it overlaps. Flushes of 512
    // and 8,192 pages finished sooner with their moves launched early, flushes
    // of about 170 pages 3% later (eleventh session, 2026-12-02, c748f5b).
    static constexpr std::size_t early_move_min_pages = 256;

    // Where the move kernel reads its page lists: zero-copy from the staging
    // slab, or from a device copy of them. With 512 KiB and 2 MiB pages the
    // device copy halves an eager free and a flush; with 128 KiB pages the
    // zero-copy lists made an eager free 3x and a serving step 4x faster
    // (second session, 2026-11-29). Pages of this size and up take the copy.
    static constexpr index_t device_move_list_min_page_bytes = index_t(256) << 10;

    // Entries of a new staging slab (32 KiB): a few decode steps' arrays, in a
    // ring small enough to stay in cache; slabs of 32 Ki entries made the calls
    // slower (ninth session, 2026-12-02, cecdea8: geometric mean over 16
    // allocator rows 0.92 / 0.88 of 32 Ki).
    static constexpr std::size_t min_slab_entries = std::size_t(1) << 12;
};

// Every runtime takes the H200's values until it is measured: the HIP backend
// has not run on an AMD GPU, and the host backends share the allocator's
// thresholds so that they plan as a GPU build does.
template <class Runtime> struct Tuning : H200Tuning {};

// Fixed for every runtime: they shape the argument structs that host code
// fills for the native and the portable kernels alike.
struct LaunchShape {
    // Runs of pages (PageRuns) and of moves (MoveRuns) passed by value: more
    // go as lists, so that a kernel's search stays a short scan and the launch
    // arguments small (1f68883 and 027cecb, 2026-12-02; a page-1 prefill of
    // 16,384 pages is often one run).
    static constexpr int max_runs = 8;
    // Handout zeroing's chunk of a page: one block's work natively (256
    // threads storing four 16-byte vectors each), one work item's portably
    // (a338b79, 2026-12-05; chosen to match the block, not timed).
    static constexpr index_t zero_chunk_bytes = 16384;
};

} // namespace kvpool::kernels
