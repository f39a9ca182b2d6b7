// Portable all-layer row kernels over the RowMap description of a KV layout:
// move token rows (every layer, both row kinds) between locations, and pack
// rows into / unpack them from a contiguous buffer (host offload staging).
// One launch each; rows are copied in the widest word their alignment allows.
#pragma once

#include <kvpool/kernels/launch_fault.hpp>
#include <kvpool/kernels/row_map.hpp>
#include <kvpool/kokkos_compat.hpp>

#include <cstdint>

namespace kvpool::kernels::portable {

namespace rows_detail {

// Word k of token t over all layers: layer by layer, the first map's row
// followed by the second's. The same order is the packed (offload) format.
template <class Word> struct RowWords {
    RowMap a;
    RowMap b;
    index_t a_words;
    index_t layer_words;
    index_t token_words;

    RowWords(const RowMap& first, const RowMap& second)
        : a(first), b(second), a_words(first.row_bytes / static_cast<index_t>(sizeof(Word))),
          layer_words(a_words + second.row_bytes / static_cast<index_t>(sizeof(Word))),
          token_words(first.layers * layer_words) {}

    KOKKOS_INLINE_FUNCTION Word* at(index_t token, index_t k) const {
        const index_t layer = k / layer_words;
        const index_t w = k % layer_words;
        return w < a_words ? reinterpret_cast<Word*>(a.row(layer, token)) + w
                           : reinterpret_cast<Word*>(b.row(layer, token)) + (w - a_words);
    }
};

inline index_t common_word_bytes(const RowMap& a, const RowMap& b) {
    const index_t wa = a.word_bytes();
    return b.row_bytes > 0 ? b.word_bytes(wa) : wa;
}

// Runs Kernel<Word, Params> over its items for the widest common word.
template <template <class, class> class Kernel, class ExecutionSpace, class Params>
void launch(const char* label, const ExecutionSpace& space, const Params& params,
            index_t word_bytes) {
    launch_fault_point<ExecutionSpace>(label);
    switch (word_bytes) {
    case 8: {
        const Kernel<std::uint64_t, Params> k(params);
        if (k.items > 0)
            Kokkos::parallel_for(label, kk::range(space, k.items), k);
        return;
    }
    case 4: {
        const Kernel<std::uint32_t, Params> k(params);
        if (k.items > 0)
            Kokkos::parallel_for(label, kk::range(space, k.items), k);
        return;
    }
    case 2: {
        const Kernel<std::uint16_t, Params> k(params);
        if (k.items > 0)
            Kokkos::parallel_for(label, kk::range(space, k.items), k);
        return;
    }
    default: {
        const Kernel<std::uint8_t, Params> k(params);
        if (k.items > 0)
            Kokkos::parallel_for(label, kk::range(space, k.items), k);
        return;
    }
    }
}

template <class DstView, class SrcView> struct MoveParams {
    RowMap a, b;
    DstView dst;
    SrcView src;
    index_t unit;
};

template <class Word, class Params> struct MoveRows {
    RowWords<Word> rows;
    Params p;
    index_t items;
    explicit MoveRows(const Params& params)
        : rows(params.a, params.b), p(params),
          items(static_cast<index_t>(params.src.extent(0)) * params.unit * rows.token_words) {}
    KOKKOS_INLINE_FUNCTION void operator()(const index_t i) const {
        const index_t item = i / rows.token_words;
        const index_t k = i % rows.token_words;
        const index_t id = item / p.unit;
        const index_t j = item % p.unit;
        *rows.at(static_cast<index_t>(p.dst(id)) * p.unit + j, k) =
            *rows.at(static_cast<index_t>(p.src(id)) * p.unit + j, k);
    }
};

template <class IdView> struct PackParams {
    RowMap a, b;
    IdView tokens;
    std::uint8_t* packed;
};

template <class Word, class Params> struct GatherRows {
    RowWords<Word> rows;
    Params p;
    index_t items;
    explicit GatherRows(const Params& params)
        : rows(params.a, params.b), p(params),
          items(static_cast<index_t>(params.tokens.extent(0)) * rows.token_words) {}
    KOKKOS_INLINE_FUNCTION void operator()(const index_t i) const {
        const index_t t = static_cast<index_t>(p.tokens(i / rows.token_words));
        reinterpret_cast<Word*>(p.packed)[i] = *rows.at(t, i % rows.token_words);
    }
};

template <class Word, class Params> struct ScatterRows {
    RowWords<Word> rows;
    Params p;
    index_t items;
    explicit ScatterRows(const Params& params)
        : rows(params.a, params.b), p(params),
          items(static_cast<index_t>(params.tokens.extent(0)) * rows.token_words) {}
    KOKKOS_INLINE_FUNCTION void operator()(const index_t i) const {
        const index_t t = static_cast<index_t>(p.tokens(i / rows.token_words));
        *rows.at(t, i % rows.token_words) = reinterpret_cast<const Word*>(p.packed)[i];
    }
};

inline index_t packed_word_bytes(const RowMap& a, const RowMap& b, const std::uint8_t* packed) {
    index_t w = common_word_bytes(a, b);
    while (w > 1 && reinterpret_cast<std::uintptr_t>(packed) % static_cast<std::uintptr_t>(w) != 0)
        w /= 2;
    return w;
}

} // namespace rows_detail

// For every i and j < unit: all layers' rows of token src(i) * unit + j are
// copied onto token dst(i) * unit + j (unit = 1: token ids; unit = page_size:
// page ids). No location is both a source and a destination and destinations
// are distinct (callers check), so every copy runs in parallel, in any order.
template <class ExecutionSpace, class DstView, class SrcView>
void move_rows(const ExecutionSpace& space, const RowMap& a, const RowMap& b, const DstView& dst,
               const SrcView& src, index_t unit) {
    rows_detail::launch<rows_detail::MoveRows>(
        "kvpool::move_rows", space, rows_detail::MoveParams<DstView, SrcView>{a, b, dst, src, unit},
        rows_detail::common_word_bytes(a, b));
}

// packed[i] = all layers' rows of tokens(i), token after token.
template <class ExecutionSpace, class IdView>
void gather_rows(const ExecutionSpace& space, const RowMap& a, const RowMap& b,
                 const IdView& tokens, std::uint8_t* packed) {
    rows_detail::launch<rows_detail::GatherRows>(
        "kvpool::gather_rows", space, rows_detail::PackParams<IdView>{a, b, tokens, packed},
        rows_detail::packed_word_bytes(a, b, packed));
}

// The inverse of gather_rows. Tokens are distinct (callers check).
template <class ExecutionSpace, class IdView>
void scatter_rows(const ExecutionSpace& space, const RowMap& a, const RowMap& b,
                  const IdView& tokens, const std::uint8_t* packed) {
    rows_detail::launch<rows_detail::ScatterRows>(
        "kvpool::scatter_rows", space,
        rows_detail::PackParams<IdView>{a, b, tokens, const_cast<std::uint8_t*>(packed)},
        rows_detail::packed_word_bytes(a, b, packed));
}

} // namespace kvpool::kernels::portable
