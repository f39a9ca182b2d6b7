// Portable kernels over the v2p/p2v page tables. Policy-free: they apply what
// the host control plane decided.
#pragma once

#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels {

// table[index[i]] = value[i] for two tables in one launch. Indices within a
// table are distinct (the host plan guarantees it), so the writes do not race.
template <class ExecutionSpace, class IndexView, class TableView>
void apply_table_writes_portable(const ExecutionSpace& space, const TableView& v2p, const IndexView& v2p_index,
                                 const IndexView& v2p_value, const TableView& p2v, const IndexView& p2v_index,
                                 const IndexView& p2v_value) {
    const index_t nv = static_cast<index_t>(v2p_index.extent(0));
    const index_t np = static_cast<index_t>(p2v_index.extent(0));
    const index_t n = nv > np ? nv : np;
    if (n == 0) return;
    Kokkos::parallel_for(
        "kvpool::apply_table_writes", kk::range(space, n), KOKKOS_LAMBDA(const index_t i) {
            if (i < nv) v2p(v2p_index(i)) = v2p_value(i);
            if (i < np) p2v(p2v_index(i)) = p2v_value(i);
        });
}

// Virtual token ids -> physical token ids; tombstones (and the -1 padding ids
// engines use) clamp to the sink slot 0. out may alias in.
template <class ExecutionSpace, class TableView, class InView, class OutView>
void translate_tokens_portable(const ExecutionSpace& space, const TableView& v2p, index_t page_size,
                               const InView& in, const OutView& out) {
    const index_t n = static_cast<index_t>(in.extent(0));
    if (n == 0) return;
    const index_t num_virtual_pages = static_cast<index_t>(v2p.extent(0));
    Kokkos::parallel_for(
        "kvpool::translate", kk::range(space, n), KOKKOS_LAMBDA(const index_t i) {
            const index_t token = in(i);
            const index_t page = token / page_size;
            index_t physical = 0;
            if (token >= 0 && page < num_virtual_pages) {
                physical = v2p(page) * page_size + token % page_size;
                if (physical < 0) physical = 0;
            }
            out(i) = physical;
        });
}

}  // namespace kvpool::kernels
