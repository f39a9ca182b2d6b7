// Portable Mamba state slot kernel: zero slots (a new request starts from an
// empty state), every layer's conv and temporal state in one launch. Copying
// slots (copy-on-write of a cached prefix state) is move_rows with unit 1.
#pragma once

#include <kvpool/kernels/portable/row_moves.hpp>

namespace kvpool::kernels::portable {

namespace rows_detail {

template <class IdView> struct ClearParams {
    RowMap a, b;
    IdView slots;
};

template <class Word, class Params> struct ClearRows {
    RowWords<Word> rows;
    Params p;
    index_t items;
    explicit ClearRows(const Params& params)
        : rows(params.a, params.b), p(params),
          items(static_cast<index_t>(params.slots.extent(0)) * rows.token_words) {}
    KOKKOS_INLINE_FUNCTION void operator()(const index_t i) const {
        *rows.at(static_cast<index_t>(p.slots(i / rows.token_words)), i % rows.token_words) =
            Word(0);
    }
};

} // namespace rows_detail

// Zeroes every layer's rows of the given slots. Repeated slots are harmless.
template <class ExecutionSpace, class IdView>
void clear_rows(const ExecutionSpace& space, const RowMap& a, const RowMap& b,
                const IdView& slots) {
    rows_detail::launch<rows_detail::ClearRows>("kvpool::clear_slots", space,
                                                rows_detail::ClearParams<IdView>{a, b, slots},
                                                rows_detail::common_word_bytes(a, b));
}

} // namespace kvpool::kernels::portable
