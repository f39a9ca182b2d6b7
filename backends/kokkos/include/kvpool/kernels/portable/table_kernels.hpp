// Portable kernels over the v2p/p2v page tables. Policy-free: they apply what
// the host control plane decided. The kernels read their Views from a copy of op.
#pragma once

#include <kvpool/kernels/op_args.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels::portable {

// Both tables' writes in one launch.
template <class ExecutionSpace, class TableView, class IndexView>
void apply_table_writes(const ExecutionSpace& space, const TableWrites<TableView, IndexView>& op) {
    const index_t nv = length(op.v2p_index);
    const index_t np = length(op.p2v_index);
    const index_t n = nv > np ? nv : np;
    if (n == 0)
        return;
    Kokkos::parallel_for(
        "kvpool::apply_table_writes", kk::range(space, n), KOKKOS_LAMBDA(const index_t i) {
            if (i < nv)
                op.v2p(op.v2p_index(i)) = op.v2p_value(i);
            if (i < np)
                op.p2v(op.p2v_index(i)) = op.p2v_value(i);
        });
}

template <class ExecutionSpace, class TableView, class InView, class OutView>
void translate_tokens(const ExecutionSpace& space,
                      const Translation<TableView, InView, OutView>& op) {
    const index_t n = length(op.in);
    if (n == 0)
        return;
    const index_t num_virtual_pages = length(op.v2p);
    const index_t page_size = op.page_size;
    const index_t page_stride = page_size * op.page_multiplier;
    Kokkos::parallel_for(
        "kvpool::translate", kk::range(space, n), KOKKOS_LAMBDA(const index_t i) {
            const index_t token = op.in(i);
            const index_t page = token / page_size;
            index_t physical = 0;
            if (token >= 0 && page < num_virtual_pages) {
                physical = op.v2p(page) * page_stride + token % page_size;
                if (physical < 0)
                    physical = 0;
            }
            op.out(i) = physical;
        });
}

} // namespace kvpool::kernels::portable
