// Portable all-layer KV page move: with the page-major layout a page is one
// contiguous run of bytes, so moving it is one copy regardless of layer count.
#pragma once

#include <kvpool/kernels/op_args.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <cstdint>

namespace kvpool::kernels::portable {

// In 8-byte words where the pages and the buffer allow, else byte by byte.
template <class ExecutionSpace, class BytesView, class PageView>
void move_pages(const ExecutionSpace& space, const PageMoves<BytesView, PageView>& op) {
    const index_t pages = length(op.src);
    const index_t page_bytes = op.page_bytes;
    if (pages == 0 || page_bytes == 0)
        return;
    std::uint8_t* const base = op.bytes.data();
    const PageView src = op.src, dst = op.dst;
    const bool words = page_bytes % 8 == 0 && reinterpret_cast<std::uintptr_t>(base) % 8 == 0;
    if (words) {
        const index_t words_per_page = page_bytes / 8;
        Kokkos::parallel_for(
            "kvpool::move_pages_u64", kk::range(space, pages * words_per_page),
            KOKKOS_LAMBDA(const index_t i) {
                const index_t page = i / words_per_page;
                const index_t word = i % words_per_page;
                auto* const words_base = reinterpret_cast<std::uint64_t*>(base);
                words_base[dst(page) * words_per_page + word] =
                    words_base[src(page) * words_per_page + word];
            });
    } else {
        Kokkos::parallel_for(
            "kvpool::move_pages_u8", kk::range(space, pages * page_bytes),
            KOKKOS_LAMBDA(const index_t i) {
                const index_t page = i / page_bytes;
                const index_t offset = i % page_bytes;
                base[dst(page) * page_bytes + offset] = base[src(page) * page_bytes + offset];
            });
    }
}

} // namespace kvpool::kernels::portable
