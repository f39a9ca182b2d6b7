// Basic vocabulary types shared by host and device code. No Kokkos, no fmt.
#pragma once

#include <cstdint>

namespace kvpool {

// Token and page ids (virtual and physical) are 64-bit everywhere, matching the
// engine-side tables; -1 marks an unbound entry (a tombstone).
using index_t = std::int64_t;

inline constexpr index_t unbound = -1;

// Which end of the shared buffer a sub-pool grows from.
enum class GrowDirection { up, down };

// Eager: every free compacts at once. Lazy: frees leave holes, a flush packs.
enum class CompactionMode { eager, lazy };

constexpr const char* to_string(GrowDirection d) {
    return d == GrowDirection::up ? "up" : "down";
}
constexpr const char* to_string(CompactionMode m) {
    return m == CompactionMode::eager ? "eager" : "lazy";
}

} // namespace kvpool
