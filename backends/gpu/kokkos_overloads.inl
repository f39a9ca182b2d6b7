// Overloads of the hot kernels for one GPU execution space, shared by CUDA and
// HIP: the including header defines KVPOOL_GPU_SPACE (the Kokkos execution
// space), KVPOOL_GPU_NAMESPACE (where the native launchers live) and
// KVPOOL_GPU_STREAM (the instance's stream accessor). These templates are more
// specialised than the portable ones in dispatch.hpp, so they win for that space.

namespace kvpool::kernels {

template <class BytesView, class IndexView>
void move_pages(const KVPOOL_GPU_SPACE& space, const BytesView& bytes, index_t page_bytes, const IndexView& src,
                const IndexView& dst) {
    KVPOOL_GPU_NAMESPACE::move_pages(space.KVPOOL_GPU_STREAM(), bytes.data(), page_bytes, src.data(), dst.data(),
                     static_cast<index_t>(src.extent(0)));
}

template <class TableView, class IndexView, class OutView>
void bind_pages_emit_tokens(const KVPOOL_GPU_SPACE& space, const TableView& v2p, const TableView& p2v,
                            const IndexView& virtual_pages, const IndexView& physical_pages, index_t page_size,
                            const OutView& out) {
    KVPOOL_GPU_NAMESPACE::bind_pages_emit_tokens(space.KVPOOL_GPU_STREAM(), v2p.data(), p2v.data(), virtual_pages.data(),
                                 physical_pages.data(), static_cast<index_t>(virtual_pages.extent(0)), page_size,
                                 out.data());
}

template <class TableView, class IndexView, class LastLocView, class OutView>
void alloc_extend_bind(const KVPOOL_GPU_SPACE& space, const TableView& v2p, const TableView& p2v,
                       const IndexView& virtual_pages, const IndexView& physical_pages,
                       const IndexView& prefix_lens, const IndexView& seq_lens, const IndexView& out_start,
                       const IndexView& page_start, const LastLocView& last_loc, index_t page_size,
                       const OutView& out) {
    KVPOOL_GPU_NAMESPACE::alloc_extend_bind(space.KVPOOL_GPU_STREAM(), v2p.data(), p2v.data(), virtual_pages.data(),
                            physical_pages.data(), prefix_lens.data(), seq_lens.data(), out_start.data(),
                            page_start.data(), last_loc.data(), static_cast<index_t>(seq_lens.extent(0)),
                            page_size, out.data());
}

template <class TableView, class IndexView, class LastLocView, class OutView>
void alloc_decode_bind(const KVPOOL_GPU_SPACE& space, const TableView& v2p, const TableView& p2v,
                       const IndexView& virtual_pages, const IndexView& physical_pages, const IndexView& seq_lens,
                       const IndexView& page_start, const LastLocView& last_loc, index_t page_size,
                       const OutView& out) {
    KVPOOL_GPU_NAMESPACE::alloc_decode_bind(space.KVPOOL_GPU_STREAM(), v2p.data(), p2v.data(), virtual_pages.data(),
                            physical_pages.data(), seq_lens.data(), page_start.data(), last_loc.data(),
                            static_cast<index_t>(seq_lens.extent(0)), page_size, out.data());
}

}  // namespace kvpool::kernels
