// Portable fused alloc-bind kernels: one launch writes the new v2p/p2v entries
// and the virtual token ids handed to the engine, from a host-prepared page list.
// kernels::dispatch.hpp picks these or a native version per execution space.
// The token arithmetic is SGLang's alloc_extend/alloc_decode kernels', run in
// virtual space: a request first fills the free tail of its last page, then
// takes whole new pages in order.
#pragma once

#include <kvpool/kokkos_compat.hpp>

namespace kvpool::kernels {

// The id-following side of a pair (the SWA side), bound in the same launch as
// the owner's pages: v2p(v) = physical_pages(k), p2v(physical_pages(k)) = v for
// the owner's k-th new virtual page v. Default-constructed: there is none.
template <class TableView, class IndexView>
struct FollowerViews {
    TableView v2p;
    TableView p2v;
    IndexView physical_pages;

    KOKKOS_INLINE_FUNCTION void bind(index_t k, index_t v) const {
        if (v2p.data() == nullptr) return;
        v2p(v) = physical_pages(k);
        p2v(physical_pages(k)) = v;
    }
};

// alloc(n): out(t) = virtual_pages(t / ps) * ps + t % ps, binding each page.
template <class ExecutionSpace, class TableView, class IndexView, class Follower, class OutView>
void bind_pages_emit_tokens_portable(const ExecutionSpace& space, const TableView& v2p, const TableView& p2v,
                                     const IndexView& virtual_pages, const IndexView& physical_pages,
                                     index_t page_size, const Follower& follower, const OutView& out) {
    const index_t n = static_cast<index_t>(virtual_pages.extent(0)) * page_size;
    if (n == 0) return;
    Kokkos::parallel_for(
        "kvpool::alloc_bind", kk::range(space, n), KOKKOS_LAMBDA(const index_t t) {
            const index_t page = t / page_size;
            const index_t v = virtual_pages(page);
            out(t) = v * page_size + t % page_size;
            if (t % page_size == 0) {
                v2p(v) = physical_pages(page);
                p2v(physical_pages(page)) = v;
                follower.bind(page, v);
            }
        });
}

// alloc_extend: request r owns out[out_start(r), out_start(r) + seq - prefix)
// and the new pages [page_start(r), page_start(r) + its new page count).
template <class ExecutionSpace, class TableView, class IndexView, class LastLocView, class Follower,
          class OutView>
void alloc_extend_bind_portable(const ExecutionSpace& space, const TableView& v2p, const TableView& p2v,
                                const IndexView& virtual_pages, const IndexView& physical_pages,
                                const IndexView& prefix_lens, const IndexView& seq_lens,
                                const IndexView& out_start, const IndexView& page_start,
                                const LastLocView& last_loc, index_t page_size, const Follower& follower,
                                const OutView& out) {
    const index_t batch = static_cast<index_t>(seq_lens.extent(0));
    if (batch == 0) return;
    Kokkos::parallel_for(
        "kvpool::alloc_extend_bind", kk::range(space, batch), KOKKOS_LAMBDA(const index_t r) {
            const index_t prefix = prefix_lens(r);
            const index_t seq = seq_lens(r);
            const index_t first_new_page = page_start(r);
            const index_t prefix_pages_end = (prefix + page_size - 1) / page_size * page_size;
            const index_t new_pages = (seq + page_size - 1) / page_size - prefix_pages_end / page_size;
            for (index_t k = 0; k < new_pages; ++k) {
                const index_t v = virtual_pages(first_new_page + k);
                v2p(v) = physical_pages(first_new_page + k);
                p2v(physical_pages(first_new_page + k)) = v;
                follower.bind(first_new_page + k, v);
            }
            index_t o = out_start(r);
            // Part 1: the free tail of the prefix's last page.
            const index_t tail = (seq < prefix_pages_end ? seq : prefix_pages_end) - prefix;
            for (index_t j = 0; j < tail; ++j) out(o++) = last_loc(r) + 1 + j;
            // Parts 2 and 3: whole new pages, then the partial last one.
            for (index_t j = 0; j < seq - prefix - tail; ++j)
                out(o++) = virtual_pages(first_new_page + j / page_size) * page_size + j % page_size;
        });
}

// alloc_decode: one token per request; a new page only when the token starts one.
template <class ExecutionSpace, class TableView, class IndexView, class LastLocView, class Follower,
          class OutView>
void alloc_decode_bind_portable(const ExecutionSpace& space, const TableView& v2p, const TableView& p2v,
                                const IndexView& virtual_pages, const IndexView& physical_pages,
                                const IndexView& seq_lens, const IndexView& page_start,
                                const LastLocView& last_loc, index_t page_size, const Follower& follower,
                                const OutView& out) {
    const index_t batch = static_cast<index_t>(seq_lens.extent(0));
    if (batch == 0) return;
    Kokkos::parallel_for(
        "kvpool::alloc_decode_bind", kk::range(space, batch), KOKKOS_LAMBDA(const index_t r) {
            const index_t seq = seq_lens(r);
            if ((seq - 1) % page_size == 0) {
                const index_t k = page_start(r);
                const index_t v = virtual_pages(k);
                v2p(v) = physical_pages(k);
                p2v(physical_pages(k)) = v;
                follower.bind(k, v);
                out(r) = v * page_size;
            } else {
                out(r) = last_loc(r) + 1;
            }
        });
}

}  // namespace kvpool::kernels
