// Portable byte fill in 8-byte words, in launches of at most 2^30 words: with
// Kokkos 3.4 a range of 2^31 or more work items (Kokkos' own initialisation of
// a 16 GiB View of bytes, or a fill of it in words) did not finish, on OpenMP
// and on CUDA alike.
#pragma once

#include <kvpool/kernels/launch_fault.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <cstdint>

namespace kvpool::kernels::portable {

template <class ExecutionSpace, class BytesView>
void fill_bytes(const ExecutionSpace& space, const BytesView& bytes, std::uint8_t value) {
    launch_fault_point<ExecutionSpace>("kvpool::fill_bytes");
    std::uint8_t* const base = bytes.data();
    const index_t size = static_cast<index_t>(bytes.extent(0));
    // Words from the first 8-byte boundary; the bytes around them one by one.
    const index_t head =
        std::min<index_t>(size, (8 - reinterpret_cast<std::uintptr_t>(base) % 8) % 8);
    const index_t words = (size - head) / 8;
    const index_t tail_start = head + words * 8;
    const std::uint64_t pattern = 0x0101010101010101ull * value;
    constexpr index_t max_words_per_launch = index_t(1) << 30;
    for (index_t first = 0; first < words; first += max_words_per_launch) {
        std::uint64_t* const chunk = reinterpret_cast<std::uint64_t*>(base + head) + first;
        const index_t n = std::min(max_words_per_launch, words - first);
        Kokkos::parallel_for(
            "kvpool::fill_bytes", kk::range(space, n),
            KOKKOS_LAMBDA(const index_t i) { chunk[i] = pattern; });
    }
    const index_t edges = head + (size - tail_start);
    if (edges > 0)
        Kokkos::parallel_for(
            "kvpool::fill_bytes_edges", kk::range(space, edges), KOKKOS_LAMBDA(const index_t i) {
                base[i < head ? i : tail_start + (i - head)] = value;
            });
}

} // namespace kvpool::kernels::portable
