// Portable Mamba state slot kernels: zero slots (a new request starts from an
// empty state) and copy slots (copy-on-write of a cached prefix state), both
// over every layer's conv and temporal state in one launch.
#pragma once

#include <kokkos/kv_row_move.hpp>

namespace kvpool::kernels {

namespace rows_detail {

template <class IdView>
struct ClearParams {
    RowMap a, b;
    IdView slots;
};

template <class Word, class Params>
struct ClearRows {
    RowWords<Word> rows;
    Params p;
    index_t items;
    explicit ClearRows(const Params& params)
        : rows(params.a, params.b),
          p(params),
          items(static_cast<index_t>(params.slots.extent(0)) * rows.token_words) {}
    KOKKOS_INLINE_FUNCTION void operator()(const index_t i) const {
        *rows.at(static_cast<index_t>(p.slots(i / rows.token_words)), i % rows.token_words) = Word(0);
    }
};

}  // namespace rows_detail

// Zeroes every layer's rows of the given slots. Repeated slots are harmless.
template <class ExecutionSpace, class IdView>
void clear_rows_portable(const ExecutionSpace& space, const RowMap& a, const RowMap& b,
                         const IdView& slots) {
    rows_detail::launch<rows_detail::ClearRows>("kvpool::clear_slots", space,
                                                rows_detail::ClearParams<IdView>{a, b, slots},
                                                rows_detail::common_word_bytes(a, b));
}

// Slot src(i) is copied onto slot dst(i), every layer; the same contract as
// move_rows_portable (disjoint sets, distinct destinations).
template <class ExecutionSpace, class IdView>
void copy_slots_portable(const ExecutionSpace& space, const RowMap& a, const RowMap& b,
                         const IdView& src, const IdView& dst) {
    move_rows_portable(space, a, b, dst, src, 1);
}

}  // namespace kvpool::kernels
