// The new pages of one allocation as a few runs of ids stepping by one, up or
// down, passed to the alloc-bind kernels by value: a fresh or densely packed
// band hands out its pages in runs (a prefill of 16,384 pages is often one,
// the owner's ids going up while a down band's pages go down), and then there
// is no page list to stage on the host or to read across the bus. No Kokkos,
// so that the native kernels use it too.
#pragma once

#include <kvpool/kernels/tuning.hpp>
#include <kvpool/types.hpp>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVPOOL_HOST_DEVICE __host__ __device__
#else
#define KVPOOL_HOST_DEVICE
#endif

namespace kvpool::kernels {

// Of count runs where run j starts at item first[j] (ascending), the one
// holding item k: a short scan, as the runs are few.
KVPOOL_HOST_DEVICE inline int run_holding(const index_t* first, int count, index_t k) {
    int j = 0;
    while (j + 1 < count && first[j + 1] <= k)
        ++j;
    return j;
}

struct PageRuns {
    // More runs than this go as lists (tuning.hpp).
    static constexpr int max_runs = LaunchShape::max_runs;

    struct Page {
        index_t virtual_page;
        index_t physical_page;
        index_t follower_page; // the follower's physical page; unused without one
    };

    // 0: the pages are not runs (the lists hold them).
    int count = 0;
    index_t pages = 0;
    // Run j covers new pages [first[j], first[j + 1]) (pages for the last),
    // starting at these ids and each going up or down by one per page (a
    // band growing down binds its pages downward).
    index_t first[max_runs] = {};
    index_t virtual_start[max_runs] = {};
    index_t physical_start[max_runs] = {};
    index_t follower_start[max_runs] = {};
    bool virtual_down[max_runs] = {};
    bool physical_down[max_runs] = {};
    bool follower_down[max_runs] = {};

    KVPOOL_HOST_DEVICE Page at(index_t k) const {
        const int j = run_holding(first, count, k);
        const index_t d = k - first[j];
        return {virtual_start[j] + (virtual_down[j] ? -d : d),
                physical_start[j] + (physical_down[j] ? -d : d),
                follower_start[j] + (follower_down[j] ? -d : d)};
    }
};

// Page moves src[k] -> dst[k] as a few runs in which each id steps by +1 or -1
// from move to move, passed to the move kernels by value like PageRuns: a
// flush walks survivors from the frontier down into the holes going up, and
// an eager free fills a freed request's pages from the pages at the frontier.
struct MoveRuns {
    static constexpr int max_runs = LaunchShape::max_runs;

    struct Move {
        index_t src;
        index_t dst;
    };

    // 0: the moves are not runs (the lists hold them).
    int count = 0;
    index_t moves = 0;
    // Run j covers moves [first[j], first[j + 1]) (moves for the last).
    index_t first[max_runs] = {};
    index_t src_start[max_runs] = {};
    index_t dst_start[max_runs] = {};
    signed char src_step[max_runs] = {};
    signed char dst_step[max_runs] = {};

    KVPOOL_HOST_DEVICE Move at(index_t k) const {
        const int j = run_holding(first, count, k);
        const index_t d = k - first[j];
        return {src_start[j] + d * src_step[j], dst_start[j] + d * dst_step[j]};
    }
};

// The n moves src[k] -> dst[k] as runs; count 0 when there are none or more
// than MoveRuns::max_runs. Stops at the first run too many.
inline MoveRuns find_move_runs(const index_t* src, const index_t* dst, index_t n) {
    MoveRuns runs;
    if (n == 0)
        return runs;
    runs.moves = n;
    const auto step_of = [](index_t from, index_t to) -> signed char {
        return to == from + 1 ? 1 : to == from - 1 ? -1 : 0;
    };
    const auto start_run = [&](index_t k) {
        runs.first[runs.count] = k;
        runs.src_start[runs.count] = src[k];
        runs.dst_start[runs.count] = dst[k];
        runs.src_step[runs.count] = 1;
        runs.dst_step[runs.count] = 1;
        ++runs.count;
    };
    start_run(0);
    if (n == 1)
        return runs;
    // One run, the common case, checked without a branch per move.
    const signed char src_step = step_of(src[0], src[1]), dst_step = step_of(dst[0], dst[1]);
    if (src_step != 0 && dst_step != 0) {
        index_t differs = 0;
        for (index_t k = 0; k < n; ++k)
            differs |= (src[k] ^ (src[0] + k * src_step)) | (dst[k] ^ (dst[0] + k * dst_step));
        if (differs == 0) {
            runs.src_step[0] = src_step;
            runs.dst_step[0] = dst_step;
            return runs;
        }
    }
    for (index_t k = 1; k < n; ++k) {
        const int j = runs.count - 1;
        if (k - runs.first[j] == 1) {
            const signed char s = step_of(src[k - 1], src[k]), d = step_of(dst[k - 1], dst[k]);
            if (s != 0 && d != 0) {
                runs.src_step[j] = s;
                runs.dst_step[j] = d;
                continue;
            }
        } else if (src[k] == src[k - 1] + runs.src_step[j] &&
                   dst[k] == dst[k - 1] + runs.dst_step[j]) {
            continue;
        }
        if (runs.count == MoveRuns::max_runs)
            return MoveRuns{};
        start_run(k);
    }
    return runs;
}

} // namespace kvpool::kernels
