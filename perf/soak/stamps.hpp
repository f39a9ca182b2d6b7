// The soak's data check: each token's KV bytes carry words derived from its
// virtual id (written at allocation, where the engine's forward would write
// KV), and a check finds them through translate. A few words per token, spread
// over its entry, catch a page moved whole or in part; writing all 128 KiB of
// a token per allocation would make the check the soak's cost. Kernels only.
#pragma once

#include <kvpool/kokkos_compat.hpp>

#include <cstdint>

namespace kvpool::soak {

// Where the stamp words of a token lie: words_per_token offsets (8-byte
// aligned) from the start of its entry to its last word.
struct StampLayout {
    index_t entry_bytes;
    int side_tag; // the full and the SWA side stamp different words
    static constexpr index_t words_per_token = 5;

    KOKKOS_INLINE_FUNCTION index_t offset(index_t physical_token, index_t word) const {
        const index_t last = entry_bytes / 8 - 1;
        return physical_token * entry_bytes + 8 * (word * last / (words_per_token - 1));
    }
    KOKKOS_INLINE_FUNCTION std::uint64_t value(index_t virtual_token, index_t word) const {
        std::uint64_t x = static_cast<std::uint64_t>(virtual_token) * 0x9e3779b97f4a7c15ull ^
                          static_cast<std::uint64_t>(side_tag * words_per_token + word + 1) *
                              0xc2b2ae3d27d4eb4full;
        x ^= x >> 31;
        return x * 0x94d049bb133111ebull;
    }
};

// Writes the stamps of tokens[i] at physical[i] (the side's translate of it).
template <class ExecutionSpace, class BytesView, class TokenView, class PhysicalView>
void stamp_tokens(const ExecutionSpace& space, const BytesView& bytes, const StampLayout& layout,
                  const TokenView& tokens, const PhysicalView& physical, index_t n) {
    std::uint8_t* const base = bytes.data();
    Kokkos::parallel_for(
        "kvpool_soak::stamp", kk::range(space, n * StampLayout::words_per_token),
        KOKKOS_LAMBDA(const index_t i) {
            const index_t t = i / StampLayout::words_per_token;
            const index_t w = i % StampLayout::words_per_token;
            const index_t p = static_cast<index_t>(physical(t));
            *reinterpret_cast<std::uint64_t*>(base + layout.offset(p, w)) =
                layout.value(tokens(t), w);
        });
}

// Stamp words of the first n tokens not found at their translated slot (a
// token translated to the sink, slot 0, or unbound counts every word). Reads
// the count back: it waits for the instance's work.
template <class ExecutionSpace, class BytesView, class TokenView, class PhysicalView>
index_t count_bad_stamps(const ExecutionSpace& space, const BytesView& bytes,
                         const StampLayout& layout, const TokenView& tokens,
                         const PhysicalView& physical, index_t n) {
    const std::uint8_t* const base = bytes.data();
    index_t bad = 0;
    Kokkos::parallel_reduce(
        "kvpool_soak::check_stamps", kk::range(space, n * StampLayout::words_per_token),
        KOKKOS_LAMBDA(const index_t i, index_t& sum) {
            const index_t t = i / StampLayout::words_per_token;
            const index_t w = i % StampLayout::words_per_token;
            const index_t p = static_cast<index_t>(physical(t));
            if (p <= 0 || *reinterpret_cast<const std::uint64_t*>(base + layout.offset(p, w)) !=
                              layout.value(tokens(t), w))
                ++sum;
        },
        bad);
    return bad;
}

} // namespace kvpool::soak
