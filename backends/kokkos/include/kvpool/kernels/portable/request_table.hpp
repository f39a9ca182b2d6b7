// Portable writes into the request table (ReqToTokenPool): token ids of
// requests, row by row. The host has checked every row and column.
#pragma once

#include <kvpool/kernels/launch_fault.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels::portable {

// table(row, start + i) = values(i).
template <class ExecutionSpace, class TableView, class ValueView>
void write_row(const ExecutionSpace& space, const TableView& table, index_t row, index_t start,
               const ValueView& values) {
    launch_fault_point<ExecutionSpace>("kvpool::write_row");
    const index_t n = static_cast<index_t>(values.extent(0));
    if (n == 0)
        return;
    Kokkos::parallel_for(
        "kvpool::req_to_token_write_row", kk::range(space, n),
        KOKKOS_LAMBDA(const index_t i) { table(row, start + i) = values(i); });
}

// Segment r of values, [offsets(r), offsets(r + 1)), goes to row rows(r) from
// column starts(r). offsets has one entry more than rows; its last is the
// length of values. The host checked that no two segments overlap.
template <class ExecutionSpace, class TableView, class IndexView, class ValueView>
void write_rows(const ExecutionSpace& space, const TableView& table, const IndexView& rows,
                const IndexView& starts, const IndexView& offsets, const ValueView& values) {
    launch_fault_point<ExecutionSpace>("kvpool::write_rows");
    const index_t n = static_cast<index_t>(values.extent(0));
    const index_t batch = static_cast<index_t>(rows.extent(0));
    if (n == 0)
        return;
    Kokkos::parallel_for(
        "kvpool::req_to_token_write_rows", kk::range(space, n), KOKKOS_LAMBDA(const index_t t) {
            // The segment holding t: offsets(lo) <= t < offsets(lo + 1), never an empty one.
            index_t lo = 0, hi = batch;
            while (hi - lo > 1) {
                const index_t mid = (lo + hi) / 2;
                if (offsets(mid) <= t)
                    lo = mid;
                else
                    hi = mid;
            }
            table(rows(lo), starts(lo) + t - offsets(lo)) = values(t);
        });
}

} // namespace kvpool::kernels::portable
