// The hot kernels as the allocator calls them: the portable Kokkos version for
// every execution space, overloaded by the native CUDA and HIP versions for
// Kokkos::Cuda and Kokkos::HIP (launched on the instance's stream).
#pragma once

#include <kokkos/alloc_bind.hpp>
#include <kokkos/move_pages.hpp>
#include <kokkos/table_kernels.hpp>

namespace kvpool::kernels {

template <class ExecutionSpace, class BytesView, class IndexView>
void move_pages(const ExecutionSpace& space, const BytesView& bytes, index_t page_bytes, const IndexView& src,
                const IndexView& dst) {
    move_pages_portable(space, bytes, page_bytes, src, dst);
}

template <class ExecutionSpace, class TableView, class IndexView>
void apply_table_writes(const ExecutionSpace& space, const TableView& v2p, const IndexView& v2p_index,
                        const IndexView& v2p_value, const TableView& p2v, const IndexView& p2v_index,
                        const IndexView& p2v_value) {
    apply_table_writes_portable(space, v2p, v2p_index, v2p_value, p2v, p2v_index, p2v_value);
}

// A compaction plan: page moves inside bytes, then the table writes.
template <class ExecutionSpace, class BytesView, class MoveView, class TableView, class IndexView>
void apply_plan(const ExecutionSpace& space, const BytesView& bytes, index_t page_bytes, const MoveView& src,
                const MoveView& dst, const TableView& v2p, const IndexView& v2p_index, const IndexView& v2p_value,
                const TableView& p2v, const IndexView& p2v_index, const IndexView& p2v_value) {
    move_pages_portable(space, bytes, page_bytes, src, dst);
    apply_table_writes_portable(space, v2p, v2p_index, v2p_value, p2v, p2v_index, p2v_value);
}

template <class ExecutionSpace, class TableView, class InView, class OutView>
void translate_tokens(const ExecutionSpace& space, const TableView& v2p, index_t page_size, const InView& in,
                      const OutView& out) {
    translate_tokens_portable(space, v2p, page_size, in, out);
}

template <class ExecutionSpace, class TableView, class IndexView, class Follower, class OutView>
void bind_pages_emit_tokens(const ExecutionSpace& space, const TableView& v2p, const TableView& p2v,
                            const IndexView& virtual_pages, const IndexView& physical_pages, index_t page_size,
                            const Follower& follower, const OutView& out) {
    bind_pages_emit_tokens_portable(space, v2p, p2v, virtual_pages, physical_pages, page_size, follower, out);
}

template <class ExecutionSpace, class TableView, class IndexView, class LastLocView, class Follower, class OutView>
void alloc_extend_bind(const ExecutionSpace& space, const TableView& v2p, const TableView& p2v,
                       const IndexView& virtual_pages, const IndexView& physical_pages,
                       const IndexView& prefix_lens, const IndexView& seq_lens, const IndexView& out_start,
                       const IndexView& page_start, const LastLocView& last_loc, index_t page_size,
                       const Follower& follower, const OutView& out) {
    alloc_extend_bind_portable(space, v2p, p2v, virtual_pages, physical_pages, prefix_lens, seq_lens, out_start,
                               page_start, last_loc, page_size, follower, out);
}

template <class ExecutionSpace, class TableView, class IndexView, class LastLocView, class Follower, class OutView>
void alloc_decode_bind(const ExecutionSpace& space, const TableView& v2p, const TableView& p2v,
                       const IndexView& virtual_pages, const IndexView& physical_pages, const IndexView& seq_lens,
                       const IndexView& page_start, const LastLocView& last_loc, index_t page_size,
                       const Follower& follower, const OutView& out) {
    alloc_decode_bind_portable(space, v2p, p2v, virtual_pages, physical_pages, seq_lens, page_start, last_loc,
                               page_size, follower, out);
}

}  // namespace kvpool::kernels

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda/kokkos_overloads.hpp>
#endif
#if defined(KOKKOS_ENABLE_HIP)
#include <hip/kokkos_overloads.hpp>
#endif
