// Portable fused alloc-bind kernels: one launch writes the new v2p/p2v entries
// and the virtual token ids handed to the engine, from a host-prepared page list.
// The token arithmetic is SGLang's alloc_extend/alloc_decode kernels', run in
// virtual space: a request first fills the free tail of its last page, then
// takes whole new pages in order.
#pragma once

#include <kvpool/kernels/op_args.hpp>
#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels::portable {

template <class ExecutionSpace, class Pages, class OutView>
void bind_pages_emit_tokens(const ExecutionSpace& space, const AllocTokens<Pages, OutView>& op) {
    const index_t page_size = op.pages.page_size;
    const index_t n = length(op.pages.virtual_pages) * page_size;
    if (n == 0)
        return;
    const Pages pages = op.pages;
    const OutView out = op.out;
    Kokkos::parallel_for(
        "kvpool::alloc_bind", kk::range(space, n), KOKKOS_LAMBDA(const index_t t) {
            const index_t page = t / page_size;
            out(t) = pages.virtual_pages(page) * page_size + t % page_size;
            if (t % page_size == 0)
                pages.bind(page);
        });
}

template <class ExecutionSpace, class Pages, class IndexView, class LastLocView, class OutView>
void alloc_extend_bind(const ExecutionSpace& space,
                       const AllocExtend<Pages, IndexView, LastLocView, OutView>& op) {
    const index_t batch = length(op.seq_lens);
    if (batch == 0)
        return;
    const Pages pages = op.pages;
    const index_t page_size = pages.page_size;
    const IndexView prefix_lens = op.prefix_lens, seq_lens = op.seq_lens;
    const IndexView out_start = op.out_start, page_start = op.page_start;
    const LastLocView last_loc = op.last_loc;
    const OutView out = op.out;
    Kokkos::parallel_for(
        "kvpool::alloc_extend_bind", kk::range(space, batch), KOKKOS_LAMBDA(const index_t r) {
            const index_t prefix = prefix_lens(r);
            const index_t seq = seq_lens(r);
            const index_t first_new_page = page_start(r);
            const index_t prefix_pages_end = (prefix + page_size - 1) / page_size * page_size;
            const index_t new_pages =
                (seq + page_size - 1) / page_size - prefix_pages_end / page_size;
            for (index_t k = 0; k < new_pages; ++k)
                pages.bind(first_new_page + k);
            index_t o = out_start(r);
            // Part 1: the free tail of the prefix's last page.
            const index_t tail = (seq < prefix_pages_end ? seq : prefix_pages_end) - prefix;
            for (index_t j = 0; j < tail; ++j)
                out(o++) = last_loc(r) + 1 + j;
            // Parts 2 and 3: whole new pages, then the partial last one.
            for (index_t j = 0; j < seq - prefix - tail; ++j)
                out(o++) =
                    pages.virtual_pages(first_new_page + j / page_size) * page_size + j % page_size;
        });
}

template <class ExecutionSpace, class Pages, class IndexView, class LastLocView, class OutView>
void alloc_decode_bind(const ExecutionSpace& space,
                       const AllocDecode<Pages, IndexView, LastLocView, OutView>& op) {
    const index_t batch = length(op.seq_lens);
    if (batch == 0)
        return;
    const Pages pages = op.pages;
    const index_t page_size = pages.page_size;
    const IndexView seq_lens = op.seq_lens, page_start = op.page_start;
    const LastLocView last_loc = op.last_loc;
    const OutView out = op.out;
    Kokkos::parallel_for(
        "kvpool::alloc_decode_bind", kk::range(space, batch), KOKKOS_LAMBDA(const index_t r) {
            if ((seq_lens(r) - 1) % page_size == 0)
                out(r) = pages.bind(page_start(r)) * page_size;
            else
                out(r) = last_loc(r) + 1;
        });
}

} // namespace kvpool::kernels::portable
