// Overloads of the hot kernels for one GPU execution space, shared by CUDA and
// HIP: the including header defines KVPOOL_GPU_SPACE (the Kokkos execution
// space), KVPOOL_GPU_NAMESPACE (where the native launchers live) and
// KVPOOL_GPU_STREAM (the instance's stream accessor). These templates are more
// specialised than the portable ones in dispatch.hpp, so they win for that space.

namespace kvpool::kernels {

template <class Follower>
KVPOOL_GPU_NAMESPACE::FollowerTables native_follower(const Follower& follower) {
    return {follower.v2p.data(), follower.p2v.data(), follower.physical_pages.data()};
}

template <class View>
index_t length(const View& view) {
    return static_cast<index_t>(view.extent(0));
}

template <class BytesView, class IndexView>
void move_pages(const KVPOOL_GPU_SPACE& space, const BytesView& bytes, index_t page_bytes, const IndexView& src,
                const IndexView& dst) {
    KVPOOL_GPU_NAMESPACE::move_pages(space.KVPOOL_GPU_STREAM(), bytes.data(), page_bytes, src.data(), dst.data(),
                                     length(src));
}

template <class TableView, class IndexView>
void apply_table_writes(const KVPOOL_GPU_SPACE& space, const TableView& v2p, const IndexView& v2p_index,
                        const IndexView& v2p_value, const TableView& p2v, const IndexView& p2v_index,
                        const IndexView& p2v_value) {
    KVPOOL_GPU_NAMESPACE::apply_table_writes(space.KVPOOL_GPU_STREAM(), v2p.data(), v2p_index.data(),
                                             v2p_value.data(), length(v2p_index), p2v.data(), p2v_index.data(),
                                             p2v_value.data(), length(p2v_index));
}

template <class BytesView, class MoveView, class TableView, class IndexView>
void apply_plan(const KVPOOL_GPU_SPACE& space, const BytesView& bytes, index_t page_bytes, const MoveView& src,
                const MoveView& dst, const TableView& v2p, const IndexView& v2p_index, const IndexView& v2p_value,
                const TableView& p2v, const IndexView& p2v_index, const IndexView& p2v_value) {
    KVPOOL_GPU_NAMESPACE::apply_plan(space.KVPOOL_GPU_STREAM(), bytes.data(), page_bytes, src.data(), dst.data(),
                                     length(src), v2p.data(), v2p_index.data(), v2p_value.data(),
                                     length(v2p_index), p2v.data(), p2v_index.data(), p2v_value.data(),
                                     length(p2v_index));
}

// Caller Views may be strided; only contiguous ones go to the native kernel.
template <class TableView, class InView, class OutView>
void translate_tokens(const KVPOOL_GPU_SPACE& space, const TableView& v2p, index_t page_size, const InView& in,
                      const OutView& out) {
    if (!in.span_is_contiguous() || !out.span_is_contiguous())
        return translate_tokens_portable(space, v2p, page_size, in, out);
    KVPOOL_GPU_NAMESPACE::translate_tokens(space.KVPOOL_GPU_STREAM(), v2p.data(), length(v2p), page_size,
                                           in.data(), length(in), out.data());
}

template <class TableView, class IndexView, class Follower, class OutView>
void bind_pages_emit_tokens(const KVPOOL_GPU_SPACE& space, const TableView& v2p, const TableView& p2v,
                            const IndexView& virtual_pages, const IndexView& physical_pages, index_t page_size,
                            const Follower& follower, const OutView& out) {
    KVPOOL_GPU_NAMESPACE::bind_pages_emit_tokens(space.KVPOOL_GPU_STREAM(), v2p.data(), p2v.data(),
                                                 virtual_pages.data(), physical_pages.data(),
                                                 length(virtual_pages), page_size, native_follower(follower),
                                                 out.data());
}

template <class TableView, class IndexView, class LastLocView, class Follower, class OutView>
void alloc_extend_bind(const KVPOOL_GPU_SPACE& space, const TableView& v2p, const TableView& p2v,
                       const IndexView& virtual_pages, const IndexView& physical_pages,
                       const IndexView& prefix_lens, const IndexView& seq_lens, const IndexView& out_start,
                       const IndexView& page_start, const LastLocView& last_loc, index_t page_size,
                       const Follower& follower, const OutView& out) {
    KVPOOL_GPU_NAMESPACE::alloc_extend_bind(space.KVPOOL_GPU_STREAM(), v2p.data(), p2v.data(), virtual_pages.data(),
                                            physical_pages.data(), prefix_lens.data(), seq_lens.data(),
                                            out_start.data(), page_start.data(), last_loc.data(), length(seq_lens),
                                            page_size, native_follower(follower), out.data());
}

template <class TableView, class IndexView, class LastLocView, class Follower, class OutView>
void alloc_decode_bind(const KVPOOL_GPU_SPACE& space, const TableView& v2p, const TableView& p2v,
                       const IndexView& virtual_pages, const IndexView& physical_pages, const IndexView& seq_lens,
                       const IndexView& page_start, const LastLocView& last_loc, index_t page_size,
                       const Follower& follower, const OutView& out) {
    KVPOOL_GPU_NAMESPACE::alloc_decode_bind(space.KVPOOL_GPU_STREAM(), v2p.data(), p2v.data(), virtual_pages.data(),
                                            physical_pages.data(), seq_lens.data(), page_start.data(),
                                            last_loc.data(), length(seq_lens), page_size, native_follower(follower),
                                            out.data());
}

}  // namespace kvpool::kernels
