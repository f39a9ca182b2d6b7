// Basic vocabulary types shared by host and device code. No Kokkos, no fmt.
#pragma once

#include <cstdint>

namespace kvpool {

// Token and page ids (virtual and physical) are 64-bit everywhere, matching the
// engine-side tables; -1 marks an unbound entry (a tombstone).
using index_t = std::int64_t;

inline constexpr index_t unbound = -1;

// Which end of the shared buffer a sub-pool grows from: up from the low end,
// down from the high end, or floating between two neighbours (it grows into
// the gap on either side and shifts away when a neighbour needs the bytes).
enum class GrowDirection { up, down, floating };

// Eager: every free compacts at once. Lazy: frees leave holes, a flush packs.
enum class CompactionMode { eager, lazy };

// k when n is 1 << k, else -1: SGLang's page sizes are powers of two, and a
// shift and a mask then stand in for a 64-bit division per id.
constexpr int power_of_two_shift(index_t n) {
    if (n <= 0 || (n & (n - 1)) != 0)
        return -1;
    int shift = 0;
    while ((index_t(1) << shift) != n)
        ++shift;
    return shift;
}

constexpr const char* to_string(GrowDirection d) {
    return d == GrowDirection::up ? "up" : d == GrowDirection::down ? "down" : "floating";
}
constexpr const char* to_string(CompactionMode m) {
    return m == CompactionMode::eager ? "eager" : "lazy";
}

} // namespace kvpool
