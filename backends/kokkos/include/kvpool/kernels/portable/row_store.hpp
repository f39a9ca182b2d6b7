// Portable KV store (set_kv_buffer): one layer's rows of new tokens written at
// their physical locations, K and V (or MLA latent and rope) in one launch.
#pragma once

#include <kvpool/kernels/launch_fault.hpp>
#include <kvpool/kernels/row_map.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels::portable {

namespace store_detail {

// Element e of token i's part: A's n x d1 x d2 elements, then B's.
template <class T, class LocView, class SrcA, class SrcB> struct StoreParts {
    RowMap a, b;
    index_t layer;
    index_t a_offset, b_offset; // elements into the row where each part starts
    LocView loc;
    SrcA src_a;
    SrcB src_b;
    index_t a_inner, a_count, b_inner, b_count;

    KOKKOS_INLINE_FUNCTION void operator()(const index_t i) const {
        const index_t per_token = a_count + b_count;
        const index_t t = i / per_token;
        const index_t e = i % per_token;
        const index_t token = static_cast<index_t>(loc(t));
        if (e < a_count) {
            reinterpret_cast<T*>(a.row(layer, token))[a_offset + e] =
                src_a(t, e / a_inner, e % a_inner);
        } else {
            const index_t f = e - a_count;
            reinterpret_cast<T*>(b.row(layer, token))[b_offset + f] =
                src_b(t, f / b_inner, f % b_inner);
        }
    }
};

} // namespace store_detail

// Layer `layer` of token loc(i): src_a(i, :, :) at element a_offset of its row
// in map a, src_b(i, :, :) at element b_offset of its row in map b. Sources are
// rank-3 Views of T (any layout, e.g. strided slices of a fused QKV tensor);
// callers have checked the extents. Locations are distinct.
template <class T, class ExecutionSpace, class LocView, class SrcA, class SrcB>
void store_rows(const ExecutionSpace& space, index_t layer, const LocView& loc, const RowMap& a,
                index_t a_offset, const SrcA& src_a, const RowMap& b, index_t b_offset,
                const SrcB& src_b) {
    launch_fault_point<ExecutionSpace>("kvpool::store_rows");
    const index_t n = static_cast<index_t>(loc.extent(0));
    const index_t a_count = static_cast<index_t>(src_a.extent(1) * src_a.extent(2));
    const index_t b_count = static_cast<index_t>(src_b.extent(1) * src_b.extent(2));
    if (n == 0 || a_count + b_count == 0)
        return;
    const store_detail::StoreParts<T, LocView, SrcA, SrcB> kernel{
        a,
        b,
        layer,
        a_offset,
        b_offset,
        loc,
        src_a,
        src_b,
        static_cast<index_t>(src_a.extent(2)),
        a_count,
        static_cast<index_t>(src_b.extent(2)),
        b_count};
    Kokkos::parallel_for("kvpool::store_rows", kk::range(space, n * (a_count + b_count)), kernel);
}

// One part only: src(i, :, :) at element offset of token loc(i)'s row.
template <class T, class ExecutionSpace, class LocView, class Src>
void store_rows(const ExecutionSpace& space, index_t layer, const LocView& loc, const RowMap& rows,
                index_t offset, const Src& src) {
    launch_fault_point<ExecutionSpace>("kvpool::store_rows");
    const index_t n = static_cast<index_t>(loc.extent(0));
    const index_t count = static_cast<index_t>(src.extent(1) * src.extent(2));
    if (n == 0 || count == 0)
        return;
    const store_detail::StoreParts<T, LocView, Src, Src> kernel{
        rows,  rows, layer, offset, 0, loc, src, src, static_cast<index_t>(src.extent(2)),
        count, 1,    0};
    Kokkos::parallel_for("kvpool::store_rows", kk::range(space, n * count), kernel);
}

} // namespace kvpool::kernels::portable
