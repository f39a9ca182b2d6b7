// Portable copy of (src_offset, dst_offset, length) chunks from one byte
// buffer to another in one launch: a transfer's paired runs, split by the
// caller into chunks of bounded length so that one long run spreads over the
// device. On a device a team per chunk, in 16-, 8- or 1-byte words, the widest
// that both ends' addresses and the length allow; on the host a memcpy per chunk.
#pragma once

#include <kvpool/kernels/launch_fault.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <cstdint>
#include <cstring>

namespace kvpool::kernels::portable {

namespace copy_detail {

struct alignas(16) Word16 {
    std::uint64_t lo, hi;
};

template <class Word, class Member>
KOKKOS_INLINE_FUNCTION void copy_words(const Member& team, const std::uint8_t* src,
                                       std::uint8_t* dst, index_t bytes) {
    const Word* const from = reinterpret_cast<const Word*>(src);
    Word* const to = reinterpret_cast<Word*>(dst);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bytes / index_t(sizeof(Word))),
                         [&](const index_t w) { to[w] = from[w]; });
}

} // namespace copy_detail

// chunks: 3 * count index_t, chunk k's source offset, destination offset and
// length at 3k, 3k + 1, 3k + 2, in memory the execution space reads.
template <class ExecutionSpace>
void copy_chunks(const ExecutionSpace& space, const std::uint8_t* src, std::uint8_t* dst,
                 const index_t* chunks, index_t count) {
    launch_fault_point<ExecutionSpace>("kvpool::copy_chunks");
    if (count == 0)
        return;
    if constexpr (kk::host_execution<ExecutionSpace>) {
        Kokkos::parallel_for("kvpool::copy_chunks_host", kk::range(space, count),
                             [=](const index_t k) {
                                 std::memcpy(dst + chunks[3 * k + 1], src + chunks[3 * k],
                                             static_cast<std::size_t>(chunks[3 * k + 2]));
                             });
    } else {
        using policy = Kokkos::TeamPolicy<ExecutionSpace>;
        Kokkos::parallel_for(
            "kvpool::copy_chunks", policy(space, count, Kokkos::AUTO),
            KOKKOS_LAMBDA(const typename policy::member_type& team) {
                const index_t k = team.league_rank();
                const std::uint8_t* const from = src + chunks[3 * k];
                std::uint8_t* const to = dst + chunks[3 * k + 1];
                const index_t bytes = chunks[3 * k + 2];
                const auto alignment = reinterpret_cast<std::uintptr_t>(from) |
                                       reinterpret_cast<std::uintptr_t>(to) |
                                       static_cast<std::uintptr_t>(bytes);
                if (alignment % 16 == 0)
                    copy_detail::copy_words<copy_detail::Word16>(team, from, to, bytes);
                else if (alignment % 8 == 0)
                    copy_detail::copy_words<std::uint64_t>(team, from, to, bytes);
                else
                    copy_detail::copy_words<std::uint8_t>(team, from, to, bytes);
            });
    }
}

} // namespace kvpool::kernels::portable
