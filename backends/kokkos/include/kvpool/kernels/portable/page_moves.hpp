// Portable all-layer KV page move: with the page-major layout a page is one
// contiguous run of bytes, so moving it is one copy regardless of layer count.
#pragma once

#include <kvpool/kernels/op_args.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <cstdint>
#include <cstring>

namespace kvpool::kernels::portable {

// On the host a page per iteration (one memcpy); on a device a word or a byte
// per thread, in 8-byte words where the pages and the buffer allow.
template <class ExecutionSpace, class BytesView, class PageView>
void move_pages(const ExecutionSpace& space, const PageMoves<BytesView, PageView>& op) {
    const index_t pages = op.size();
    const index_t page_bytes = op.page_bytes;
    if (pages == 0 || page_bytes == 0)
        return;
    std::uint8_t* const base = op.bytes.data();
    if constexpr (kk::host_execution<ExecutionSpace>) {
        Kokkos::parallel_for(
            "kvpool::move_pages_host", kk::range(space, pages), [=](const index_t k) {
                const MoveRuns::Move move = op.at(k);
                std::memcpy(base + move.dst * page_bytes, base + move.src * page_bytes,
                            static_cast<std::size_t>(page_bytes));
            });
    } else if (page_bytes % 8 == 0 && reinterpret_cast<std::uintptr_t>(base) % 8 == 0) {
        const index_t words_per_page = page_bytes / 8;
        Kokkos::parallel_for(
            "kvpool::move_pages_u64", kk::range(space, pages * words_per_page),
            KOKKOS_LAMBDA(const index_t i) {
                const index_t word = i % words_per_page;
                const MoveRuns::Move move = op.at(i / words_per_page);
                auto* const words_base = reinterpret_cast<std::uint64_t*>(base);
                words_base[move.dst * words_per_page + word] =
                    words_base[move.src * words_per_page + word];
            });
    } else {
        Kokkos::parallel_for(
            "kvpool::move_pages_u8", kk::range(space, pages * page_bytes),
            KOKKOS_LAMBDA(const index_t i) {
                const index_t offset = i % page_bytes;
                const MoveRuns::Move move = op.at(i / page_bytes);
                base[move.dst * page_bytes + offset] = base[move.src * page_bytes + offset];
            });
    }
}

} // namespace kvpool::kernels::portable
