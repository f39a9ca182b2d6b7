// Portable fused alloc-bind kernels: one launch writes the new v2p/p2v entries
// and the virtual token ids handed to the engine, from a host-prepared page list.
// The token arithmetic is SGLang's alloc_extend/alloc_decode kernels', run in
// virtual space: a request first fills the free tail of its last page, then
// takes whole new pages in order. With handout zeroing the same launch zeroes
// the new pages, in op.pages.zero_chunks() work items after the others (a
// request's partly filled last page is not touched: it is no new page). The
// kernels read their Views from a copy of op.
#pragma once

#include <kvpool/kernels/op_args.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels::portable {

template <class ExecutionSpace, class Pages, class OutView>
void bind_pages_emit_tokens(const ExecutionSpace& space, const AllocTokens<Pages, OutView>& op) {
    const index_t page_size = op.pages.page_size;
    const index_t n = op.pages.size() * page_size;
    if (n == 0)
        return;
    const bool emit = length(op.out) > 0;
    Kokkos::parallel_for(
        "kvpool::alloc_bind", kk::range(space, n + op.pages.zero_chunks()),
        KOKKOS_LAMBDA(const index_t t) {
            if (t >= n) {
                op.pages.zero_chunk(t - n);
                return;
            }
            const index_t page = t / page_size;
            if (emit)
                op.out(t) = op.pages.virtual_page(page) * page_size + t % page_size;
            if (t % page_size == 0)
                op.pages.bind(page);
        });
}

template <class ExecutionSpace, class Pages, class IndexView, class LastLocView, class OutView>
void alloc_extend_bind(const ExecutionSpace& space,
                       const AllocExtend<Pages, IndexView, LastLocView, OutView>& op) {
    const index_t batch = length(op.seq_lens);
    if (batch == 0)
        return;
    const index_t page_size = op.pages.page_size;
    Kokkos::parallel_for(
        "kvpool::alloc_extend_bind", kk::range(space, batch + op.pages.zero_chunks()),
        KOKKOS_LAMBDA(const index_t r) {
            if (r >= batch) {
                op.pages.zero_chunk(r - batch);
                return;
            }
            const index_t prefix = op.prefix_lens(r);
            const index_t seq = op.seq_lens(r);
            const index_t first_new_page = op.page_start(r);
            const index_t prefix_pages_end = (prefix + page_size - 1) / page_size * page_size;
            const index_t new_pages =
                (seq + page_size - 1) / page_size - prefix_pages_end / page_size;
            for (index_t k = 0; k < new_pages; ++k)
                op.pages.bind(first_new_page + k);
            index_t o = op.out_start(r);
            // Part 1: the free tail of the prefix's last page.
            const index_t tail = (seq < prefix_pages_end ? seq : prefix_pages_end) - prefix;
            for (index_t j = 0; j < tail; ++j)
                op.out(o++) = op.last_loc(r) + 1 + j;
            // Parts 2 and 3: whole new pages, then the partial last one.
            for (index_t j = 0; j < seq - prefix - tail; ++j)
                op.out(o++) = op.pages.virtual_page(first_new_page + j / page_size) * page_size +
                              j % page_size;
        });
}

template <class ExecutionSpace, class Pages, class IndexView, class LastLocView, class OutView>
void alloc_decode_bind(const ExecutionSpace& space,
                       const AllocDecode<Pages, IndexView, LastLocView, OutView>& op) {
    const index_t batch = length(op.seq_lens);
    if (batch == 0)
        return;
    const index_t page_size = op.pages.page_size;
    Kokkos::parallel_for(
        "kvpool::alloc_decode_bind", kk::range(space, batch + op.pages.zero_chunks()),
        KOKKOS_LAMBDA(const index_t r) {
            if (r >= batch) {
                op.pages.zero_chunk(r - batch);
                return;
            }
            if ((op.seq_lens(r) - 1) % page_size == 0)
                op.out(r) = op.pages.bind(op.page_start(r)) * page_size;
            else
                op.out(r) = op.last_loc(r) + 1;
        });
}

} // namespace kvpool::kernels::portable
