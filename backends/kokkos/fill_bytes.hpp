// Portable byte fill in 8-byte words. Creating a multi-GiB View of bytes with
// Kokkos' own initialisation runs one work item per byte (and on Kokkos 3.4
// with CUDA did not finish for a 16 GiB buffer); this is one per word.
#pragma once

#include <kvpool/kokkos_compat.hpp>

#include <cstdint>

namespace kvpool::kernels {

template <class ExecutionSpace, class BytesView>
void fill_bytes(const ExecutionSpace& space, const BytesView& bytes, std::uint8_t value) {
    std::uint8_t* const base = bytes.data();
    const index_t size = static_cast<index_t>(bytes.extent(0));
    // Words from the first 8-byte boundary; the bytes around them one by one.
    const index_t head = std::min<index_t>(size, (8 - reinterpret_cast<std::uintptr_t>(base) % 8) % 8);
    const index_t words = (size - head) / 8;
    const index_t tail_start = head + words * 8;
    const std::uint64_t pattern = 0x0101010101010101ull * value;
    if (words > 0)
        Kokkos::parallel_for(
            "kvpool::fill_bytes", kk::range(space, words), KOKKOS_LAMBDA(const index_t i) {
                reinterpret_cast<std::uint64_t*>(base + head)[i] = pattern;
            });
    const index_t edges = head + (size - tail_start);
    if (edges > 0)
        Kokkos::parallel_for(
            "kvpool::fill_bytes_edges", kk::range(space, edges), KOKKOS_LAMBDA(const index_t i) {
                base[i < head ? i : tail_start + (i - head)] = value;
            });
}

}  // namespace kvpool::kernels
